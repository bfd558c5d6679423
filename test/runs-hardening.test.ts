import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { LanguageModel, ModelRequest, StreamPart } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

/** A model whose calls wait at a gate until the test opens it (an abort ends the wait). */
class GateModel implements LanguageModel {
  readonly provider = 'openai' as const
  readonly supportsTools = true
  readonly contextWindow = 100_000
  calls = 0
  #open = false
  #waiters: Array<() => void> = []

  constructor(readonly id: string) {}

  open(): void {
    this.#open = true
    for (const wake of this.#waiters.splice(0)) wake()
  }

  async *stream(request: ModelRequest): AsyncGenerator<StreamPart> {
    request.signal?.throwIfAborted()
    this.calls++
    if (!this.#open) {
      await new Promise<void>((resolve) => {
        this.#waiters.push(resolve)
        request.signal?.addEventListener('abort', () => resolve(), { once: true })
      })
    }
    request.signal?.throwIfAborted()
    yield { type: 'text-delta', text: 'done' }
    yield { type: 'finish', reason: 'stop' }
  }
}

async function waitForRun(server: TestServer, token: string, runId: string, check: (run: Record<string, unknown>) => boolean, timeoutMs = 10_000): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const run = (await server.request('GET', `/api/runs/${runId}`, { token })).body
    if (check(run)) return run
    if (Date.now() > deadline) throw new Error(`run ${runId} did not reach the expected state: ${JSON.stringify(run)}`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

// Issue 12: runs that never hang and never double-act.
describe('runs hardening', () => {
  let store: Store
  let server: TestServer
  let alice: TestUser
  let projectId: string
  const gate = new GateModel('gate')
  const held = new GateModel('held')

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { plugins: ['rdm'], models: [gate, held], llmConcurrency: 1 })
    alice = await server.createUser()
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'hardening' } })).body.id
  })
  afterAll(async () => {
    gate.open()
    held.open()
    await server?.close()
    await store?.close()
  })

  const conversation = async (): Promise<string> => (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body.id
  const start = async (conversationId: string, body: Record<string, unknown> = {}) => {
    const answer = await server.request('POST', `/api/conversations/${conversationId}/runs`, { token: alice.token, body: { input: 'hi', ...body } })
    expect(answer.status, JSON.stringify(answer.body)).toBe(201)
    return answer.body.id as string
  }

  it('a run cancelled while it waits for a model slot gives its place up (limit 1: later runs still get the slot)', async () => {
    const holder = await start(await conversation())
    await waitForRun(server, alice.token, holder, () => gate.calls === 1)
    const waiting = await start(await conversation())
    // It waits for the slot: its model call has not started.
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(gate.calls).toBe(1)
    expect((await server.request('POST', `/api/runs/${waiting}/cancel`, { token: alice.token })).body.status).toBe('cancelled')
    gate.open()
    await waitForRun(server, alice.token, holder, (run) => run.status === 'completed')
    const later = await start(await conversation())
    await waitForRun(server, alice.token, later, (run) => run.status === 'completed', 5_000)
  })

  it('ifActive "interrupt" supersedes the active run and the queued ones behind it, and starts at once', async () => {
    gate.open()
    const conversationId = await conversation()
    const active = await start(conversationId, { model: 'held' })
    const queued = await start(conversationId, { model: 'held', ifActive: 'enqueue' })
    expect((await server.request('GET', `/api/runs/${queued}`, { token: alice.token })).body.status).toBe('queued')
    const interrupting = await server.request('POST', `/api/conversations/${conversationId}/runs`, { token: alice.token, body: { input: 'stop, do this', model: 'gate', ifActive: 'interrupt' } })
    expect(interrupting.status, JSON.stringify(interrupting.body)).toBe(201)
    for (const runId of [active, queued]) expect((await server.request('GET', `/api/runs/${runId}`, { token: alice.token })).body).toMatchObject({ status: 'cancelled', cancelReason: 'superseded' })
    await waitForRun(server, alice.token, interrupting.body.id, (run) => run.status === 'completed')
  })

  it('POST /api/conversations/:id/runs honours Idempotency-Key: a retry answers the same run and starts no second one', async () => {
    gate.open()
    const conversationId = await conversation()
    const post = (input: string) => server.request('POST', `/api/conversations/${conversationId}/runs`, { token: alice.token, body: { input, model: 'gate' }, headers: { 'idempotency-key': 'retry-me-1' } })
    const first = await post('once')
    expect(first.status).toBe(201)
    await waitForRun(server, alice.token, first.body.id, (run) => run.status === 'completed')
    const again = await post('once')
    expect(again.status).toBe(201)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(again.body).toMatchObject({ id: first.body.id, status: 'completed' })
    const runs = (await server.request('GET', `/api/conversations/${conversationId}/runs`, { token: alice.token })).body.items
    expect(runs.map((run: { id: string }) => run.id)).toEqual([first.body.id])
    const messages = (await server.request('GET', `/api/conversations/${conversationId}/messages`, { token: alice.token })).body.items
    expect(messages.filter((message: { role: string }) => message.role === 'user')).toHaveLength(1)
    const reused = await post('something else')
    expect(reused.status).toBe(422)
    expect(reused.body.code).toBe('idempotency_key_reused')
  })
})
