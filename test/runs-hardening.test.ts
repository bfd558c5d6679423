import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { ScriptedModel, type LanguageModel, type ModelRequest, type StreamPart } from '../src/llm/index.js'
import { getConversation, type Store } from '../src/store/index.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { verifyAuditChain } from '../src/cmdbus/index.js'
import { waitFor, waitForRun } from './helpers/waits.js'
import { testDb } from '../src/store/test-access.js'

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

// Runs that never hang and never double-act (docs/architecture.md#the-run-loop).
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
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'hardening' } }))
      .body.id
  })
  afterAll(async () => {
    gate.open()
    held.open()
    await server?.close()
    await store?.close()
  })

  const conversation = async (): Promise<string> =>
    (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body.id
  const start = async (conversationId: string, body: Record<string, unknown> = {}) => {
    const answer = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: { input: 'hi', ...body },
    })
    expect(answer.status, JSON.stringify(answer.body)).toBe(201)
    return answer.body.id as string
  }

  it('a run cancelled while it waits for a model slot gives its place up (limit 1: later runs still get the slot)', async () => {
    const holder = await start(await conversation())
    await waitForRun(server, alice.token, holder, () => gate.calls === 1)
    const waiting = await start(await conversation())
    // It waits for the slot: its model call has not started. Nothing to wait for here — the
    // assertion is that nothing happens for a while.
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(gate.calls).toBe(1)
    expect((await server.request('POST', `/api/runs/${waiting}/cancel`, { token: alice.token })).body.status).toBe(
      'cancelled',
    )
    gate.open()
    await waitForRun(server, alice.token, holder, ['completed'])
    const later = await start(await conversation())
    await waitForRun(server, alice.token, later, ['completed'], 5_000)
  })

  it('ifActive "interrupt" supersedes the active run and the queued ones behind it, and starts at once', async () => {
    gate.open()
    const conversationId = await conversation()
    const active = await start(conversationId, { model: 'held' })
    const queued = await start(conversationId, { model: 'held', ifActive: 'enqueue' })
    expect((await server.request('GET', `/api/runs/${queued}`, { token: alice.token })).body.status).toBe('queued')
    const interrupting = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: { input: 'stop, do this', model: 'gate', ifActive: 'interrupt' },
    })
    expect(interrupting.status, JSON.stringify(interrupting.body)).toBe(201)
    for (const runId of [active, queued])
      expect((await server.request('GET', `/api/runs/${runId}`, { token: alice.token })).body).toMatchObject({
        status: 'cancelled',
        cancelReason: 'superseded',
      })
    await waitForRun(server, alice.token, interrupting.body.id, ['completed'])
  })

  it('POST /api/conversations/:id/runs honours Idempotency-Key: a retry answers the same run and starts no second one', async () => {
    gate.open()
    const conversationId = await conversation()
    const post = (input: string) =>
      server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input, model: 'gate' },
        headers: { 'idempotency-key': 'retry-me-1' },
      })
    const first = await post('once')
    expect(first.status).toBe(201)
    await waitForRun(server, alice.token, first.body.id, ['completed'])
    const again = await post('once')
    expect(again.status).toBe(201)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(again.body).toMatchObject({ id: first.body.id, status: 'completed' })
    const runs = (await server.request('GET', `/api/conversations/${conversationId}/runs`, { token: alice.token })).body
      .items
    expect(runs.map((run: { id: string }) => run.id)).toEqual([first.body.id])
    const messages = (
      await server.request('GET', `/api/conversations/${conversationId}/messages`, { token: alice.token })
    ).body.items
    expect(messages.filter((message: { role: string }) => message.role === 'user')).toHaveLength(1)
    const reused = await post('something else')
    expect(reused.status).toBe(422)
    expect(reused.body.code).toBe('idempotency_key_reused')
  })
})

// On every engine: on Postgres the requests really overlap (docs/reference/http-api.md, idempotency).
for (const engine of new Set(['pglite' as const, ...apiEngines()])) {
  describe(`runs hardening: one Idempotency-Key at once, on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let projectId: string
    const held = new GateModel('held')

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { models: [held] })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'keys' } })).body
        .id
    })
    afterAll(async () => {
      held.open()
      await server?.close()
      await store?.close()
    })

    it('concurrent retries with one Idempotency-Key answer the one run, and an "interrupt" retry never ends it', async () => {
      for (const ifActive of Array.from({ length: 10 }, (_, index) => (index % 2 === 0 ? undefined : 'interrupt'))) {
        const conversationId = (
          await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
        ).body.id as string
        // An interrupt has a run to supersede: one already active, which it ends (never its own key's).
        const before =
          ifActive === 'interrupt'
            ? (
                await server.request('POST', `/api/conversations/${conversationId}/runs`, {
                  token: alice.token,
                  body: { input: 'earlier', model: 'held' },
                })
              ).body.id
            : undefined
        const key = `together-${Math.random()}`
        const post = () =>
          server.request('POST', `/api/conversations/${conversationId}/runs`, {
            token: alice.token,
            body: { input: 'same', model: 'held', ...(ifActive && { ifActive }) },
            headers: { 'idempotency-key': key },
          })
        const answers = await Promise.all([post(), post(), post()])
        const label = JSON.stringify({ ifActive, answers: answers.map((answer) => [answer.status, answer.body.code]) })
        expect(
          answers.map((answer) => answer.status),
          label,
        ).toEqual([201, 201, 201])
        expect(answers[1]!.body.id, label).toBe(answers[0]!.body.id)
        const run = await server.request('GET', `/api/runs/${answers[0]!.body.id}`, { token: alice.token })
        expect(run.body.status, label).not.toBe('cancelled')
        const runs = await server.request('GET', `/api/conversations/${conversationId}/runs`, { token: alice.token })
        expect(runs.body.items, label).toHaveLength(before ? 2 : 1)
        if (before)
          expect((await server.request('GET', `/api/runs/${before}`, { token: alice.token })).body.status).toBe(
            'cancelled',
          )
        await server.request('POST', `/api/runs/${answers[0]!.body.id}/cancel`, { token: alice.token })
      }
    })
  })
}

// Fencing, decisions settled in the bus's transaction, decision and run expiry,
// graceful stop.
describe('runs hardening: leases, decisions and stopping', () => {
  let store: Store
  let server: TestServer
  let alice: TestUser
  let projectId: string
  const slowPlugin = new URL('./__fixtures__/plugins/slow-tool.ts', import.meta.url).pathname
  const model = new ScriptedModel({ id: 'scripted', turns: [] })
  const adminToken = 'admin-token-of-the-hardening-tests'

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      plugins: ['rdm', slowPlugin],
      models: [model],
      actionTtlMs: 2_000,
      adminToken,
    })
    alice = await server.createUser()
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'leases' } })).body
      .id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  const conversation = async (): Promise<string> =>
    (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body.id
  const start = async (conversationId: string, body: Record<string, unknown> = {}) => {
    const answer = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: { input: 'hi', ...body },
    })
    expect(answer.status, JSON.stringify(answer.body)).toBe(201)
    return answer.body.id as string
  }

  it('a driver whose lease passed to someone else writes nothing more and stops', async () => {
    model.setTurns([{ text: Array.from({ length: 80 }, (_, index) => `w${index} `).join(''), chunks: 80, delayMs: 25 }])
    const runId = await start(await conversation())
    await waitForRun(server, alice.token, runId, (run) => run.iteration === 1)
    // The driver is streaming: its first delta is in.
    await waitFor(
      () =>
        testDb(store)
          .selectFrom('events')
          .select('id')
          .where('run_id', '=', runId)
          .where('type', '=', 'message.delta')
          .executeTakeFirst(),
      { what: 'a message.delta' },
    )
    // Another instance took the run over (its fencing token replaced ours).
    await testDb(store)
      .updateTable('runs')
      .set({ lease_owner: 'another-instance.1', lease_expires_at: new Date(Date.now() + 60_000) })
      .where('id', '=', runId)
      .execute()
    const stolenAt = await testDb(store)
      .selectFrom('events')
      .select((eb) => eb.fn.max('id').as('max'))
      .executeTakeFirstOrThrow()
    // The old driver must write nothing more: an absence, so a fixed while (longer than the model's
    // 80 × 25 ms stream) is the assertion's window.
    await new Promise((resolve) => setTimeout(resolve, 2_500))
    const later = await testDb(store)
      .selectFrom('events')
      .select(['id', 'type'])
      .where('run_id', '=', runId)
      .where('id', '>', String(stolenAt.max))
      .execute()
    // At most one delta already in flight; no completion, no terminal event, no state change.
    expect(later.filter((event) => event.type !== 'message.delta')).toEqual([])
    expect(later.length).toBeLessThanOrEqual(1)
    const row = await testDb(store)
      .selectFrom('runs')
      .select(['status', 'lease_owner'])
      .where('id', '=', runId)
      .executeTakeFirstOrThrow()
    expect(row).toEqual({ status: 'running', lease_owner: 'another-instance.1' })
    const message = await testDb(store)
      .selectFrom('messages')
      .select('status')
      .where('run_id', '=', runId)
      .where('role', '=', 'assistant')
      .executeTakeFirstOrThrow()
    expect(message.status).toBe('streaming')
    // Tidy up as the new owner would: cancel it (from here, as a non-driver).
    expect((await server.request('POST', `/api/runs/${runId}/cancel`, { token: alice.token })).body.status).toBe(
      'cancelled',
    )
  })

  it('a tool that finishes after its run passed to another instance: its dispatch and audit are recorded, the run gets no answer from the old driver', async () => {
    model.setTurns([{ toolCalls: [{ name: 'slow__brief', arguments: {} }] }, { text: 'after' }])
    const runId = await start(await conversation())
    const calls = async () =>
      testDb(store).selectFrom('run_tool_calls').select(['id', 'status']).where('run_id', '=', runId).execute()
    await waitFor(async () => (await calls()).at(0)?.status === 'running', { what: 'the tool to start' })
    // Another instance took the run over while the tool works.
    await testDb(store)
      .updateTable('runs')
      .set({ lease_owner: 'another-instance.2', lease_expires_at: new Date(Date.now() + 60_000) })
      .where('id', '=', runId)
      .execute()
    const finished = async () =>
      testDb(store)
        .selectFrom('dispatches')
        .select(['id', 'status'])
        .where('run_id', '=', runId)
        .executeTakeFirstOrThrow()
    await waitFor(async () => (await finished()).status !== 'running', { what: 'the tool to finish' })
    // Its last audit step is written with the result (and any answer to the run would be too).
    const auditSteps = async () =>
      (
        await testDb(store)
          .selectFrom('audit_log')
          .select('step')
          .where('dispatch_id', '=', (await finished()).id)
          .execute()
      ).map((entry) => entry.step)
    await waitFor(async () => (await auditSteps()).includes('finished'), { what: "the dispatch's finished audit step" })
    // The command ran: its dispatch and audit say so.
    const dispatch = await finished()
    expect(dispatch.status).toBe('succeeded')
    const steps = await testDb(store)
      .selectFrom('audit_log')
      .select('step')
      .where('dispatch_id', '=', dispatch.id)
      .orderBy('id')
      .execute()
    expect(steps.map((entry) => entry.step)).toEqual(['requested', 'running', 'finished'])
    expect((await verifyAuditChain(store)).ok).toBe(true)
    // But the run is someone else's now: the old driver answered nothing.
    expect((await calls())[0]!.status).toBe('running')
    expect(
      await testDb(store)
        .selectFrom('messages')
        .select('id')
        .where('run_id', '=', runId)
        .where('role', '=', 'tool')
        .execute(),
    ).toEqual([])
    expect(
      await testDb(store)
        .selectFrom('events')
        .select('id')
        .where('run_id', '=', runId)
        .where('type', '=', 'tool_call.completed')
        .execute(),
    ).toEqual([])
    // Tidy up as the new owner would.
    expect((await server.request('POST', `/api/runs/${runId}/cancel`, { token: alice.token })).body.status).toBe(
      'cancelled',
    )
  })

  it('an approved call is in the ledger by the time the decision is answered, and cancelling the run reaches its handler', async () => {
    // A confirm: true command always asks.
    model.setTurns([{ toolCalls: [{ name: 'slow__guarded', arguments: {} }] }, { text: 'after' }])
    const runId = await start(await conversation())
    const waiting = await waitForRun(server, alice.token, runId, ['requires_action'])
    const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!.decisionId
    // Approving runs the handler (which waits until cancelled); cancel the run meanwhile.
    const approving = server.request('POST', `/api/decisions/${decisionId}`, {
      token: alice.token,
      body: { decision: 'approve' },
    })
    // Its handler is at work once the command's dispatch is running.
    const running = () =>
      testDb(store)
        .selectFrom('dispatches')
        .select('id')
        .where('run_id', '=', runId)
        .where('status', '=', 'running')
        .executeTakeFirst()
    await waitFor(running, { what: "the approved call's dispatch to be running" })
    const cancelled = await server.request('POST', `/api/runs/${runId}/cancel`, { token: alice.token })
    expect(cancelled.body.status).toBe('cancelled')
    const approved = await approving
    expect(approved.status).toBe(200)
    // The handler saw the run's cancel signal instead of working on for 20 s.
    expect(approved.body.dispatch).toMatchObject({ status: 'cancelled' })
    const calls = await testDb(store)
      .selectFrom('run_tool_calls')
      .select(['status'])
      .where('run_id', '=', runId)
      .execute()
    expect(calls).toEqual([{ status: 'cancelled' }])
  })

  it('a user disabled while their run works has the run ended (access_revoked), not left to finish', async () => {
    const bob = await server.createUser()
    const bobProject = (await server.request('POST', '/api/projects', { token: bob.token, body: { name: 'b' } })).body
      .id
    const bobConversation = (
      await server.request('POST', `/api/projects/${bobProject}/conversations`, { token: bob.token, body: {} })
    ).body.id
    model.setTurns([{ toolCalls: [{ name: 'slow__wait', arguments: {} }] }, { text: 'after' }])
    const created = await server.request('POST', `/api/conversations/${bobConversation}/runs`, {
      token: bob.token,
      body: { input: 'hi' },
    })
    expect(created.status).toBe(201)
    const runId = created.body.id as string
    const status = async () =>
      (await testDb(store).selectFrom('runs').select('status').where('id', '=', runId).executeTakeFirstOrThrow()).status
    await waitFor(
      () =>
        testDb(store)
          .selectFrom('dispatches')
          .select('id')
          .where('run_id', '=', runId)
          .where('status', '=', 'running')
          .executeTakeFirst(),
      { what: 'the tool call to be running' },
    )
    const disabled = await server.request('PATCH', `/api/admin/users/${bob.user.id}`, {
      token: adminToken,
      body: { disabled: true },
    })
    expect(disabled.status).toBe(200)
    // Ended by the disabling, not left to finish once the tool's 20 s are up.
    const ended = await waitFor(
      async () => {
        const now = await status()
        return ['cancelled', 'completed', 'failed'].includes(now) ? now : undefined
      },
      { what: 'the disabled user’s run to end', timeoutMs: 40_000 },
    )
    expect(ended).toBe('cancelled')
  })

  it('a run created just after an access change, by someone who can no longer see the conversation, is ended', async () => {
    // The window a request's own check leaves: access changed after it, before the run had a driver
    // (where the change's re-check of driven runs could not see it). Here the run is created for a
    // user who never could see the conversation, right after an announcement.
    const mallory = await server.createUser()
    const aliceConversation = (await getConversation(store, await conversation()))!
    // An access announcement about the conversation's project (any change to it announces) opens the
    // window; one about another project does not concern this run.
    expect(
      (await server.request('PATCH', `/api/projects/${projectId}`, { token: alice.token, body: { description: 'x' } }))
        .status,
    ).toBe(200)
    model.setTurns([{ toolCalls: [{ name: 'slow__wait', arguments: {} }] }, { text: 'after' }])
    const created = await server.runs.createRun(aliceConversation, mallory.user.id, { input: 'hi' })
    expect('run' in created).toBe(true)
    const runId = 'run' in created ? created.run.id : ''
    const ended = await waitFor(
      async () => {
        const { status } = await testDb(store)
          .selectFrom('runs')
          .select('status')
          .where('id', '=', runId)
          .executeTakeFirstOrThrow()
        return ['cancelled', 'completed', 'failed'].includes(status) ? status : undefined
      },
      { what: 'the run to end', timeoutMs: 40_000 },
    )
    expect(ended).toBe('cancelled')
  })

  it('an approved call whose handler finishes despite a cancel is recorded as done, with its result (audit included)', async () => {
    model.setTurns([{ toolCalls: [{ name: 'slow__stubborn', arguments: {} }] }, { text: 'after' }])
    const runId = await start(await conversation())
    const waiting = await waitForRun(server, alice.token, runId, ['requires_action'])
    const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!.decisionId
    const approving = server.request('POST', `/api/decisions/${decisionId}`, {
      token: alice.token,
      body: { decision: 'approve' },
    })
    const running = () =>
      testDb(store)
        .selectFrom('dispatches')
        .select('id')
        .where('run_id', '=', runId)
        .where('status', '=', 'running')
        .executeTakeFirst()
    const dispatch = await waitFor(running, { what: "the approved call's dispatch to be running" })
    expect((await server.request('POST', `/api/runs/${runId}/cancel`, { token: alice.token })).body.status).toBe(
      'cancelled',
    )
    const approved = await approving
    expect(approved.status).toBe(200)
    // Its work was done: the record says so, and keeps what it returned.
    expect(approved.body.dispatch).toMatchObject({ status: 'succeeded', result: { finished: true } })
    const finished = await testDb(store)
      .selectFrom('audit_log')
      .select('envelope')
      .where('dispatch_id', '=', dispatch.id)
      .where('step', '=', 'finished')
      .executeTakeFirstOrThrow()
    expect(JSON.stringify(finished.envelope)).toMatch(/"status":"succeeded"/)
    expect((await verifyAuditChain(store)).ok).toBe(true)
  })

  it('the result of an approved call is written with its dispatch: answered when the decision answer returns', async () => {
    model.setTurns([{ toolCalls: [{ name: 'slow__guarded', arguments: {} }] }, { text: 'after' }])
    const runId = await start(await conversation())
    const waiting = await waitForRun(server, alice.token, runId, ['requires_action'])
    const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!.decisionId
    const rejected = await server.request('POST', `/api/decisions/${decisionId}`, {
      token: alice.token,
      body: { decision: 'reject' },
    })
    expect(rejected.status).toBe(200)
    // No listener running later: the ledger changed in the decision's own transaction.
    const calls = await testDb(store)
      .selectFrom('run_tool_calls')
      .select(['status'])
      .where('run_id', '=', runId)
      .execute()
    expect(calls).toEqual([{ status: 'rejected' }])
    await waitForRun(server, alice.token, runId, ['completed'])
  })

  it('a decision that expires (seen through GET /api/decisions) ends its run expired, not resumed with an expired result', async () => {
    model.setTurns([{ toolCalls: [{ name: 'slow__guarded', arguments: {} }] }, { text: 'should not be asked' }])
    const runId = await start(await conversation())
    await waitForRun(server, alice.token, runId, ['requires_action'])
    await testDb(store)
      .updateTable('decisions')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('run_id', '=', runId)
      .execute()
    await server.request('GET', '/api/decisions?status=pending', { token: alice.token })
    await server.runs.sweep()
    const run = await waitForRun(server, alice.token, runId, (candidate) => candidate.status !== 'requires_action')
    expect(run.status).toBe('expired')
    const calls = await testDb(store)
      .selectFrom('run_tool_calls')
      .select(['status'])
      .where('run_id', '=', runId)
      .execute()
    expect(calls).toEqual([{ status: 'expired' }])
  })

  it("a partial answer does not restart the run's clock: it expires PLINTH_ACTION_TTL after it started waiting", async () => {
    model.setTurns([
      {
        toolCalls: [
          { name: 'slow__guarded', arguments: {} },
          { name: 'propose_command', arguments: { command: 'ls' } },
        ],
      },
      { text: 'after' },
    ])
    const runId = await start(await conversation(), { clientTools: ['propose_command'] })
    const waiting = await waitForRun(server, alice.token, runId, ['requires_action'])
    const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!.decisionId
    // Time is the subject (the 2 s TTL runs on the server's wall clock): the clock jumps instead of the
    // test sleeping. Only `Date` is faked — it keeps moving with real time, and timers, sockets and
    // database I/O stay real.
    vi.useFakeTimers({ toFake: ['Date'], shouldAdvanceTime: true })
    try {
      vi.setSystemTime(Date.now() + 1_200)
      expect(
        (
          await server.request('POST', `/api/decisions/${decisionId}`, {
            token: alice.token,
            body: { decision: 'reject' },
          })
        ).status,
      ).toBe(200)
      // Had the reject restarted the clock, the run would now have waited only 1 s: within its TTL.
      vi.setSystemTime(Date.now() + 1_000)
      await server.runs.sweep()
    } finally {
      vi.useRealTimers()
    }
    // 2 s after it started waiting (not after the reject), the client tool still unanswered: expired.
    expect((await server.request('GET', `/api/runs/${runId}`, { token: alice.token })).body.status).toBe('expired')
  })

  it('a stopping server takes no new runs (503 shutting_down) and hands its running runs over instead of failing them', async () => {
    model.setTurns([{ text: Array.from({ length: 60 }, (_, index) => `w${index} `).join(''), chunks: 60, delayMs: 30 }])
    const conversationId = await conversation()
    const runId = await start(conversationId)
    await waitForRun(server, alice.token, runId, (run) => run.iteration === 1)
    // The driver is streaming: its first delta is in.
    await waitFor(
      () =>
        testDb(store)
          .selectFrom('events')
          .select('id')
          .where('run_id', '=', runId)
          .where('type', '=', 'message.delta')
          .executeTakeFirst(),
      { what: 'a message.delta' },
    )
    await server.runs.stop()
    const refused = await server.request('POST', `/api/conversations/${await conversation()}/runs`, {
      token: alice.token,
      body: { input: 'late' },
    })
    expect(refused.status).toBe(503)
    expect(refused.body.code).toBe('shutting_down')
    const row = await testDb(store)
      .selectFrom('runs')
      .select(['status', 'lease_owner', 'iteration'])
      .where('id', '=', runId)
      .executeTakeFirstOrThrow()
    expect(row).toEqual({ status: 'running', lease_owner: null, iteration: 0 })
    const message = await testDb(store)
      .selectFrom('messages')
      .select('status')
      .where('run_id', '=', runId)
      .where('role', '=', 'assistant')
      .executeTakeFirstOrThrow()
    expect(message.status).toBe('interrupted')
  })
})
