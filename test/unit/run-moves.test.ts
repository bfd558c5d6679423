import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { getRun, RunMoveRefused, updateRun, type Run, type Store } from '../../src/store/index.js'
import { openTestStore, testEngines } from '../helpers/engines.js'
import { seedProject, startedRun, type SeedScope } from '../helpers/store-seed.js'

// A status write checks the state it starts from at run time, in its own statement
// (docs/architecture.md#run-states): the table's types stop an unlisted move from compiling, this stops
// a listed one from being made on a run that moved on since it was read.
describe.each(testEngines())('run moves on %s', (engine) => {
  let store: Store
  let scope: SeedScope

  beforeAll(async () => {
    store = await openTestStore(engine)
    scope = await seedProject(store, 'moves')
  })
  afterAll(async () => store?.close())

  /** A run in `status`, alone in a new conversation. */
  async function runIn(status: 'running' | 'requires_action' | 'completed'): Promise<Run> {
    const run = await startedRun(store, scope, 'test')
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
