import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  createConversation,
  createProject,
  createUser,
  listRuns,
  readTranscript,
  type NewRun,
  type Store,
} from '../../src/store/index.js'
import { openTestStore, testEngines } from '../helpers/engines.js'
import { runView } from '../../src/resources/index.js'

// A user message's run is created by one statement, whatever the conversation holds
// (docs/architecture.md#run-states): started, queued behind another, or refused with the active run.
describe.each(testEngines())('creating a run on %s', (engine) => {
  let store: Store
  let projectId: string
  let ownerId: string
  const lease = () => ({ owner: 'test.1', expiresAt: new Date(Date.now() + 60_000) })

  beforeAll(async () => {
    store = await openTestStore(engine)
    const user = await createUser(store, 'creator')
    if ('error' in user) throw new Error('unexpected')
    ownerId = user.id
    projectId = (await store.transaction((tx) => createProject(tx, user.id, { name: 'create-run' }))).id
  })
  afterAll(async () => store?.close())

  const newConversation = async () =>
    (await store.transaction((tx) => createConversation(tx, { projectId, ownerId }))).id
  const message = (conversationId: string, input: string): NewRun => ({
    conversationId,
    projectId,
    ownerId,
    model: 'm',
    maxIterations: 3,
    approvalPolicy: 'ask',
    clientTools: [],
    input,
    view: runView,
  })

  it('starts the run in an idle conversation, with its message and events, and the driver’s first reads', async () => {
    const conversationId = await newConversation()
    const created = await store.createRun(message(conversationId, 'hello'), {
      lease: lease(),
      allowQueue: false,
      prefetch: { maxChars: 10_000 },
    })
    if (!('run' in created)) throw new Error('expected a run')
    expect(created.run).toMatchObject({ status: 'running', phase: 'thinking', leaseOwner: 'test.1' })
    expect(created.events.map((event) => event.type)).toEqual([
      'run.created',
      'message.created',
      'message.completed',
      'run.status',
    ])
    expect(created.events[0]!.data).toMatchObject({ run: { id: created.run.id, status: 'running' } })
    expect(created.prefetched?.transcript.map((row) => row.content)).toEqual(['hello'])
    expect((await readTranscript(store, conversationId)).map((row) => row.content)).toEqual(['hello'])
  })

  it('reports the active run and writes nothing, or queues behind it when asked', async () => {
    const conversationId = await newConversation()
    const first = await store.createRun(message(conversationId, 'one'), { lease: lease(), allowQueue: false })
    if (!('run' in first)) throw new Error('expected a run')

    const refused = await store.createRun(message(conversationId, 'two'), { lease: lease(), allowQueue: false })
    expect(refused).toMatchObject({ active: { id: first.run.id, status: 'running' }, events: [] })
    expect((await readTranscript(store, conversationId)).map((row) => row.content)).toEqual(['one'])

    const queued = await store.createRun(message(conversationId, 'three'), {
      lease: lease(),
      allowQueue: true,
      prefetch: { maxChars: 10_000 },
    })
    if (!('run' in queued)) throw new Error('expected a run')
    expect(queued.run).toMatchObject({ status: 'queued', phase: null, leaseOwner: null, startedAt: null })
    expect(queued.prefetched).toBeUndefined()
    // No run.status: it has not started.
    expect(queued.events.map((event) => event.type)).toEqual(['run.created', 'message.created', 'message.completed'])
    expect(queued.events[0]!.data).toMatchObject({ run: { id: queued.run.id, status: 'queued' } })
    const runs = await listRuns(store, { conversationId }, { limit: 10 })
    expect(runs.items.map((run) => run.status).sort()).toEqual(['queued', 'running'])
  })

  it('starts exactly one of several runs created at once in an idle conversation and queues the rest', async () => {
    const conversationId = await newConversation()
    const created = await Promise.all(
      Array.from({ length: 6 }, (_, index) =>
        store.createRun(message(conversationId, `m${index}`), { lease: lease(), allowQueue: true }),
      ),
    )
    const statuses = created.map((result) => ('run' in result ? result.run.status : 'active'))
    expect(statuses.filter((status) => status === 'running')).toHaveLength(1)
    expect(statuses.filter((status) => status === 'queued')).toHaveLength(5)
    const stored = await listRuns(store, { conversationId }, { limit: 10 })
    expect(stored.items.map((run) => run.status).sort()).toEqual([...statuses].sort())
  })

  it('inside the caller’s transaction: what `within` writes and the run commit together, or neither', async () => {
    const conversationId = await newConversation()
    await expect(
      store.createRun(message(conversationId, 'doomed'), {
        lease: lease(),
        allowQueue: false,
        within: async () => {
          throw new Error('the hook failed')
        },
      }),
    ).rejects.toThrow('the hook failed')
    expect((await listRuns(store, { conversationId }, { limit: 10 })).items).toEqual([])
    expect(await readTranscript(store, conversationId)).toEqual([])

    let seen: string | undefined
    const created = await store.createRun(message(conversationId, 'kept'), {
      lease: lease(),
      allowQueue: false,
      within: async (_tx, run) => {
        seen = run.id
      },
    })
    if (!('run' in created)) throw new Error('expected a run')
    expect(seen).toBe(created.run.id)
    expect(created.run.status).toBe('running')
  })
})
