import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ModelError, ScriptedModel, type LanguageModel, type ModelRequest, type StreamPart } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { openSse } from './helpers/sse-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitFor, waitForRun } from './helpers/waits.js'
import { testDb } from '../src/store/test-access.js'

/** Fails its second call once with a retryable-looking upstream error after streaming a little. */
class FlakyModel implements LanguageModel {
  readonly id = 'flaky'
  readonly provider = 'openai' as const
  readonly supportsTools = true
  readonly contextWindow = 100_000
  calls = 0

  async *stream(request: ModelRequest): AsyncGenerator<StreamPart> {
    this.calls++
    const answered = request.messages.some((message) => message.role === 'tool')
    if (!answered) {
      yield { type: 'tool-call', call: { id: 'p1', name: 'rdm__ping', arguments: '{"target":"flaky"}' } }
      yield { type: 'finish', reason: 'tool_calls' }
      return
    }
    if (this.calls === 2) {
      yield { type: 'text-delta', text: 'partial ' }
      throw new ModelError('upstream_error', 'upstream answered 502', { upstreamStatus: 502, isRetryable: true })
    }
    yield { type: 'text-delta', text: 'Recovered answer.' }
    yield { type: 'finish', reason: 'stop' }
  }
}

for (const engine of apiEngines()) {
  describe(`run lifecycle on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let projectId: string
    const scripted = new ScriptedModel({ id: 'scripted', turns: [] })
    const toolless = new ScriptedModel({
      id: 'toolless',
      turns: [{ text: 'I cannot look that up.' }],
      supportsTools: false,
    })
    const flaky = new FlakyModel()

    beforeAll(async () => {
      store = await openTestStore(engine)
      const slowPlugin = new URL('./__fixtures__/plugins/slow-tool.ts', import.meta.url).pathname
      server = await startTestServer(store, { plugins: ['rdm', slowPlugin], models: [scripted, flaky, toolless] })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'lifecycle' } }))
        .body.id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const conversation = async (): Promise<string> =>
      (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body
        .id
    const start = (conversationId: string, body: Record<string, unknown>) =>
      server.request('POST', `/api/conversations/${conversationId}/runs`, { token: alice.token, body })

    it('messages sent at once to an idle conversation: one run starts, the others are told it is active — or queue behind it in order', async () => {
      // The first run must still be active when the last of the six requests lands, on a loaded machine too.
      const slow = { text: 'a b c d e f g h', chunks: 8, delayMs: 400 }
      scripted.setTurns(Array.from({ length: 12 }, () => slow))
      const idle = await conversation()
      const answers = await Promise.all(
        Array.from({ length: 6 }, (_, index) => start(idle, { input: `m${index}`, model: 'scripted' })),
      )
      const started = answers.filter((answer) => answer.status === 201)
      expect(started).toHaveLength(1)
      const refused = answers.filter((answer) => answer.status === 409)
      expect(refused).toHaveLength(5)
      for (const answer of refused)
        expect(answer.body).toMatchObject({ code: 'run_active', activeRunId: started[0]!.body.id })
      const messages = (await server.request('GET', `/api/conversations/${idle}/messages`, { token: alice.token })).body
        .items
      expect(messages.filter((message: { role: string }) => message.role === 'user')).toHaveLength(1)
      await waitForRun(server, alice.token, started[0]!.body.id, ['completed'])

      const queueing = await conversation()
      const queued = await Promise.all(
        Array.from({ length: 4 }, (_, index) =>
          start(queueing, { input: `q${index}`, model: 'scripted', ifActive: 'enqueue' }),
        ),
      )
      expect(queued.map((answer) => answer.status)).toEqual([201, 201, 201, 201])
      expect(queued.filter((answer) => answer.body.status === 'running')).toHaveLength(1)
      for (const answer of queued) await waitForRun(server, alice.token, answer.body.id, ['completed'], 20_000)
      const runs = await Promise.all(
        queued.map(
          async (answer) => (await server.request('GET', `/api/runs/${answer.body.id}`, { token: alice.token })).body,
        ),
      )
      // They ran one after another, never two at once. The one that started at once is whichever request's
      // statement ran first (concurrent requests have no order, and ids are made before the statement);
      // the queued ones then ran in the order they were created.
      const byStart = [...runs].sort((a, b) => Date.parse(a.startedAt) - Date.parse(b.startedAt))
      for (let index = 1; index < byStart.length; index++)
        expect(Date.parse(byStart[index].startedAt)).toBeGreaterThanOrEqual(Date.parse(byStart[index - 1].endedAt))
      const waited = byStart.slice(1).map((run) => run.id as string)
      expect(waited).toEqual([...waited].sort())
    })

    it('cancels during model streaming: the partial text is kept as a cancelled message and run.cancelled is the last event', async () => {
      const conversationId = await conversation()
      scripted.setTurns([
        { text: Array.from({ length: 200 }, (_, index) => `w${index} `).join(''), chunks: 200, delayMs: 20 },
      ])
      const run = (await start(conversationId, { input: 'talk' })).body
      const stream = await openSse(`${server.url}/api/runs/${run.id}/events`, { token: alice.token })
      await waitForRun(server, alice.token, run.id, () => true)
      await stream.waitFor(8)
      const cancelled = await server.request('POST', `/api/runs/${run.id}/cancel`, { token: alice.token })
      expect(cancelled.body.status).toBe('cancelled')
      await stream.ended
      expect(stream.events.at(-1)).toMatchObject({
        event: 'run.cancelled',
        data: { runId: run.id, reason: 'cancelled' },
      })
      const messages = (
        await server.request('GET', `/api/conversations/${conversationId}/messages`, { token: alice.token })
      ).body.items
      const assistant = messages.find((message: { role: string }) => message.role === 'assistant')
      expect(assistant.status).toBe('cancelled')
      expect(assistant.content.length).toBeGreaterThan(0)
      expect(assistant.content.length).toBeLessThan(200 * 4)
    })

    it('cancels during a tool: the handler sees the abort and the call ends cancelled', async () => {
      const conversationId = await conversation()
      scripted.setTurns([{ toolCalls: [{ name: 'slow__wait', arguments: {} }] }])
      const run = (await start(conversationId, { input: 'wait' })).body
      await waitForRun(server, alice.token, run.id, (current) => current.phase === 'tool_running')
      // The call is `running` once its handler has been handed the work.
      const running = () =>
        testDb(store)
          .selectFrom('run_tool_calls')
          .select('id')
          .where('run_id', '=', run.id)
          .where('status', '=', 'running')
          .executeTakeFirst()
      await waitFor(running, { what: 'the tool call to be running' })
      const started = Date.now()
      const cancelled = await server.request('POST', `/api/runs/${run.id}/cancel`, { token: alice.token })
      expect(cancelled.body.status).toBe('cancelled')
      expect(Date.now() - started).toBeLessThan(5000)
      const calls = await testDb(store)
        .selectFrom('run_tool_calls')
        .select(['status'])
        .where('run_id', '=', run.id)
        .execute()
      expect(calls.map((call) => call.status)).toEqual(['cancelled'])
    })

    it('fails on an upstream error with a clear code, and resumes from the checkpoint without re-running the tool', async () => {
      const conversationId = await conversation()
      const run = (await start(conversationId, { input: 'go', model: 'flaky' })).body
      const failed = await waitForRun(server, alice.token, run.id, ['failed'])
      expect(failed.error).toEqual({ code: 'upstream_error', message: 'upstream answered 502', upstreamStatus: 502 })
      const resumed = await server.request('POST', `/api/runs/${run.id}/resume`, { token: alice.token })
      expect(resumed.status).toBe(200)
      await waitForRun(server, alice.token, run.id, ['completed'])
      const dispatches = await testDb(store)
        .selectFrom('dispatches')
        .select('id')
        .where('run_id', '=', run.id)
        .execute()
      expect(dispatches).toHaveLength(1)
      const again = await server.request('POST', `/api/runs/${run.id}/resume`, { token: alice.token })
      expect([again.status, again.body.code]).toEqual([409, 'run_not_resumable'])
      // The run's own stream goes on past its run.failed to the resumed attempt's end.
      const replay = await openSse(`${server.url}/api/runs/${run.id}/events`, { token: alice.token })
      await replay.ended
      const names = replay.events.map((event) => event.event)
      expect(names).toContain('run.failed')
      expect(names.at(-1)).toBe('run.completed')
    })

    it('resumes only the latest run of a conversation: a later message would come before the resumed answer', async () => {
      const conversationId = await conversation()
      flaky.calls = 0
      const run = (await start(conversationId, { input: 'go', model: 'flaky' })).body
      await waitForRun(server, alice.token, run.id, ['failed'])
      toolless.setTurns([{ text: 'Later answer.' }])
      const later = (await start(conversationId, { input: 'something else', model: 'toolless' })).body
      await waitForRun(server, alice.token, later.id, ['completed'])
      const resumed = await server.request('POST', `/api/runs/${run.id}/resume`, { token: alice.token })
      expect([resumed.status, resumed.body.code]).toEqual([409, 'run_not_resumable'])
      expect((await server.request('GET', `/api/runs/${run.id}`, { token: alice.token })).body.status).toBe('failed')
    })

    it('gives a model without tool support no tools and tells it not to invent data', async () => {
      const conversationId = await conversation()
      const run = (await start(conversationId, { input: 'what is the latency?', model: 'toolless' })).body
      await waitForRun(server, alice.token, run.id, ['completed'])
      const request = toolless.calls.at(-1)!
      expect(request.tools).toEqual([])
      expect((request.messages[0] as { content: string }).content).toMatch(/cannot use tools/)
    })

    it('replays exactly the missed events, deltas included, when a client reconnects mid-run', async () => {
      const conversationId = await conversation()
      scripted.setTurns([
        { text: Array.from({ length: 60 }, (_, index) => `t${index} `).join(''), chunks: 60, delayMs: 15 },
      ])
      const run = (await start(conversationId, { input: 'stream' })).body
      const first = await openSse(`${server.url}/api/runs/${run.id}/events`, { token: alice.token })
      const early = await first.waitFor(6)
      first.close()
      const lastSeen = early.at(-1)!.id!
      const resumed = await openSse(`${server.url}/api/runs/${run.id}/events`, {
        token: alice.token,
        lastEventId: lastSeen,
      })
      await resumed.ended // a run stream ends after the terminal event
      const full = await openSse(`${server.url}/api/runs/${run.id}/events`, { token: alice.token })
      await full.ended
      const expected = full.events.filter((event) => Number(event.id) > Number(lastSeen)).map((event) => event.id)
      expect(resumed.events.map((event) => event.id)).toEqual(expected)
      expect(resumed.events.at(-1)!.event).toBe('run.completed')
      const text = full.events
        .filter((event) => event.event === 'message.delta')
        .map((event) => event.data.text)
        .join('')
      const completed = full.events.filter((event) => event.event === 'message.completed').at(-1)!
      expect(text).toBe(completed.data.content)
    })
  })
}

describe('a run left waiting', () => {
  it('ends expired after PLINTH_ACTION_TTL, answering its calls and expiring its decision', async () => {
    const store = await openTestStore('pglite')
    const model = new ScriptedModel({
      id: 'scripted',
      turns: [{ toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'T', body: 'b' } }] }],
    })
    const server = await startTestServer(store, { plugins: ['rdm'], models: [model], actionTtlMs: 300 })
    try {
      const user = await server.createUser()
      const project = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'p' } })).body
        .id
      const conversationId = (
        await server.request('POST', `/api/projects/${project}/conversations`, { token: user.token, body: {} })
      ).body.id
      const run = (
        await server.request('POST', `/api/conversations/${conversationId}/runs`, {
          token: user.token,
          body: { input: 'x' },
        })
      ).body
      await waitForRun(server, user.token, run.id, ['requires_action'])
      // Sweeps until the 300 ms TTL has passed and the sweep expired the run.
      await waitFor(
        async () => {
          await server.runs.sweep()
          return (await server.request('GET', `/api/runs/${run.id}`, { token: user.token })).body.status === 'expired'
        },
        { what: 'the sweep to expire the run' },
      )
      const calls = await testDb(store)
        .selectFrom('run_tool_calls')
        .select(['status', 'decision_id'])
        .where('run_id', '=', run.id)
        .execute()
      expect(calls.map((call) => call.status)).toEqual(['expired'])
      const decision = await testDb(store)
        .selectFrom('decisions')
        .select('status')
        .where('id', '=', calls[0]!.decision_id!)
        .executeTakeFirstOrThrow()
      expect(decision.status).toBe('expired')
      // The conversation is free again.
      expect(
        (
          await server.request('POST', `/api/conversations/${conversationId}/runs`, {
            token: user.token,
            body: { input: 'next' },
          })
        ).status,
      ).toBe(201)
    } finally {
      await server.close()
      await store.close()
    }
  })
})

/** A new user's run (input "x") in a new project and conversation, once it waits for a person. */
async function startWaitingRun(server: TestServer) {
  const user = await server.createUser()
  const project = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'p' } })).body.id
  const conversationId: string = (
    await server.request('POST', `/api/projects/${project}/conversations`, { token: user.token, body: {} })
  ).body.id
  const run = (
    await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: user.token,
      body: { input: 'x' },
    })
  ).body
  const waiting = await waitForRun(server, user.token, run.id, ['requires_action'])
  return { user, conversationId, run, waiting }
}

describe('a run whose approved call is running', () => {
  const held = new URL('./__fixtures__/plugins/held-tool.ts', import.meta.url).pathname
  /** A run waiting for `calls` (held tools) with a 300 ms action deadline. */
  const setup = async (calls: string[]) => {
    const dir = await mkdtemp(join(tmpdir(), 'plinth-held-'))
    const files = calls.map((_, index) => join(dir, `release-${index}`))
    const store = await openTestStore('pglite')
    const model = new ScriptedModel({
      id: 'scripted',
      turns: [
        { toolCalls: calls.map((name, index) => ({ name, arguments: { file: files[index] } })) },
        { text: 'done' },
      ],
    })
    const server = await startTestServer(store, { plugins: [held], models: [model], actionTtlMs: 300 })
    const { user, run, waiting } = await startWaitingRun(server)
    const waitedFrom = Date.now()
    const decisions = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions
    const getRun = async () => (await server.request('GET', `/api/runs/${run.id}`, { token: user.token })).body
    return {
      store,
      run,
      server,
      user,
      files,
      decisions,
      getRun,
      // The approval answers once the approved command has run.
      approve: (decisionId: string) =>
        server.request('POST', `/api/decisions/${decisionId}`, { token: user.token, body: { decision: 'approve' } }),
      /** Sweeps until the run has waited well past its 300 ms deadline, then once more. */
      sweepPastDeadline: async () => {
        await waitFor(
          async () => {
            await server.runs.sweep()
            return Date.now() > waitedFrom + 1_000
          },
          { what: 'the deadline to pass' },
        )
        await server.runs.sweep()
      },
      waitForStatus: (statuses: string[]) => waitForRun(server, user.token, run.id, statuses, 30_000),
      close: async () => {
        await server.close()
        await store.close()
        await rm(dir, { recursive: true, force: true })
      },
    }
  }

  it('is not expired while the command works, and requiredAction leaves the call out', async () => {
    const held = await setup(['held__approved'])
    try {
      const answer = held.approve(held.decisions[0]!.decisionId)
      await waitFor(
        async () => ((await held.getRun()).requiredAction as { decisions: unknown[] }).decisions.length === 0,
        { what: 'requiredAction without the approved call' },
      )
      await held.sweepPastDeadline()
      expect((await held.getRun()).status).toBe('requires_action')
      // The stream says so too: its last run.status awaits nothing of anyone.
      const stream = await openSse(`${held.server.url}/api/runs/${held.run.id}/events`, { token: held.user.token })
      const statuses = () => stream.events.filter((event) => event.event === 'run.status')
      await waitFor(() => statuses().some((event) => event.data.requiredAction?.decisions?.length === 1), {
        what: 'the replayed run.status of the wait',
      })
      await waitFor(() => statuses().at(-1)?.data.requiredAction?.decisions?.length === 0, {
        what: 'a run.status awaiting nothing after the approval',
      })
      stream.close()
      await writeFile(held.files[0]!, '')
      expect((await answer).body.dispatch).toMatchObject({ status: 'succeeded', result: { released: true } })
      expect((await held.waitForStatus(['completed', 'expired', 'failed'])).status).toBe('completed')
      const calls = await testDb(held.store)
        .selectFrom('run_tool_calls')
        .select('status')
        .where('run_id', '=', held.run.id)
        .execute()
      expect(calls.map((call) => call.status)).toEqual(['ok'])
    } finally {
      await held.close()
    }
  })

  it('expired for the call still asking, stops the approved one running: nothing ran that the run says did not', async () => {
    const held = await setup(['held__approved', 'held__approved'])
    try {
      expect(held.decisions).toHaveLength(2)
      const answer = held.approve(held.decisions[0]!.decisionId)
      await waitFor(
        async () => ((await held.getRun()).requiredAction as { decisions: unknown[] }).decisions.length === 1,
        { what: 'requiredAction with only the call still asking' },
      )
      await held.sweepPastDeadline()
      expect((await held.waitForStatus(['expired'])).status).toBe('expired')
      // The approved command was told to stop (its file never appears), and says so.
      expect((await answer).body.dispatch.result).toEqual({ aborted: true })
    } finally {
      await held.close()
    }
  })
})

describe('a run waiting for a decision across a restart', () => {
  it('stays decidable: the new server resumes it on approval', async () => {
    const store = await openTestStore('pglite')
    const turns = [
      { toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'Across', body: 'b' } }] },
      { text: 'Written after the restart.' },
    ]
    const first = await startTestServer(store, {
      plugins: ['rdm'],
      models: [new ScriptedModel({ id: 'scripted', turns })],
    })
    const { user, conversationId, run, waiting } = await startWaitingRun(first)
    const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!.decisionId
    await first.close()
    // A new server on the same database; its model continues with the second turn.
    const second = await startTestServer(store, {
      plugins: ['rdm'],
      models: [new ScriptedModel({ id: 'scripted', turns: turns.slice(1) })],
    })
    try {
      expect((await second.request('GET', `/api/runs/${run.id}`, { token: user.token })).body.status).toBe(
        'requires_action',
      )
      const approved = await second.request('POST', `/api/decisions/${decisionId}`, {
        token: user.token,
        body: { decision: 'approve' },
      })
      expect(approved.body.dispatch.status).toBe('succeeded')
      await waitForRun(second, user.token, run.id, ['completed'])
      const messages = (
        await second.request('GET', `/api/conversations/${conversationId}/messages`, { token: user.token })
      ).body.items
      expect(messages.at(-1)).toMatchObject({ role: 'assistant', content: 'Written after the restart.' })
    } finally {
      await second.close()
      await store.close()
    }
  })
})
