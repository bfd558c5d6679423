import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  createConversation,
  createProject,
  createUser,
  getRun,
  RunMoveRefused,
  updateRun,
  type Run,
  type Store,
} from '../../src/store/index.js'
import { openTestStore, testEngines } from '../helpers/engines.js'
import { runView } from '../../src/resources/index.js'

// A status write checks the state it starts from at run time, in its own statement
// (docs/architecture.md#run-states): the table's types stop an unlisted move from compiling, this stops
// a listed one from being made on a run that moved on since it was read.
describe.each(testEngines())('run moves on %s', (engine) => {
  let store: Store
  let projectId: string
  let ownerId: string

  beforeAll(async () => {
    store = await openTestStore(engine)
    const user = await createUser(store, 'moves')
    if ('error' in user) throw new Error('unexpected')
    ownerId = user.id
    const project = await store.transaction((tx) => createProject(tx, user.id, { name: 'moves' }))
    projectId = project.id
  })
  afterAll(async () => store?.close())

  /** A run in `status`, alone in a new conversation. */
  async function runIn(status: 'running' | 'requires_action' | 'completed'): Promise<Run> {
    const conversationId = (await store.transaction((tx) => createConversation(tx, { projectId, ownerId }))).id
    const created = await store.createRun(
      {
        conversationId,
        projectId,
        ownerId,
        model: 'm',
        maxIterations: 5,
        approvalPolicy: 'ask',
        clientTools: [],
        input: 'hi',
        view: runView,
      },
      { allowQueue: false, lease: { owner: 'test', expiresAt: new Date(Date.now() + 60_000) } },
    )
    if (!('run' in created)) throw new Error('the conversation has an active run')
    const run = created.run
    if (status === 'requires_action')
      return store.transaction((tx) => updateRun(tx, run.id, { move: { from: ['running'], to: 'requires_action' } }))
    if (status === 'completed')
      return store.transaction((tx) =>
        updateRun(tx, run.id, { move: { from: ['running'], to: 'completed' }, ended: true, lease: null }),
      )
    return run
  }

  it('makes a listed move from the state it lists', async () => {
    const waiting = await runIn('requires_action')
    const expired = await store.transaction((tx) =>
      updateRun(tx, waiting.id, { move: { from: ['requires_action'], to: 'expired' }, ended: true }),
    )
    expect(expired.status).toBe('expired')
  })

  it('refuses a listed move when the run is in another state, and changes nothing', async () => {
    // The sweeper read the run waiting; an answer continued it before the sweeper's write.
    const waiting = await runIn('requires_action')
    await store.transaction((tx) => updateRun(tx, waiting.id, { move: { from: ['requires_action'], to: 'running' } }))
    const before = await getRun(store, waiting.id)
    const refused = store.transaction((tx) =>
      updateRun(tx, waiting.id, { move: { from: ['requires_action'], to: 'expired' }, ended: true }),
    )
    await expect(refused).rejects.toBeInstanceOf(RunMoveRefused)
    await expect(refused).rejects.toThrow(/is not in requires_action: it cannot move to expired/)
    expect(await getRun(store, waiting.id)).toEqual(before)
  })

  it('refuses to move an ended run', async () => {
    const done = await runIn('completed')
    await expect(
      store.transaction((tx) => updateRun(tx, done.id, { move: { from: ['failed'], to: 'running' } })),
    ).rejects.toBeInstanceOf(RunMoveRefused)
    expect((await getRun(store, done.id))?.status).toBe('completed')
  })
})
