import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel, type ScriptedTurn } from '../src/llm/index.js'
import { readTranscript, type Store } from '../src/store/index.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { openSse, type SseEvent } from './helpers/sse-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitFor, waitForRun } from './helpers/waits.js'
import { testDb } from '../src/store/test-access.js'

/** Every assistant tool call has exactly one result in the transcript, right after it. */
async function expectLedgerInvariant(store: Store, conversationId: string): Promise<void> {
  const transcript = await readTranscript(store, conversationId)
  const results = transcript.filter((message) => message.role === 'tool').map((message) => message.toolCallId)
  const calls = transcript.flatMap((message) => (message.toolCalls ?? []).map((call) => call.callId))
  expect([...results].sort()).toEqual([...calls].sort())
  expect(new Set(results).size).toBe(results.length)
  const open = await testDb(store)
    .selectFrom('run_tool_calls')
    .select(['id', 'status'])
    .where('status', 'in', ['pending', 'running', 'awaiting_decision', 'awaiting_output'])
    .execute()
  const active = await testDb(store)
    .selectFrom('runs')
    .select('id')
    .where('status', 'in', ['running', 'requires_action', 'queued'])
    .execute()
  if (active.length === 0) expect(open).toEqual([])
}

for (const engine of apiEngines()) {
  describe(`agent runs on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let projectId: string
    const model = new ScriptedModel({ id: 'scripted-test', turns: [] })

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { plugins: ['rdm'], models: [model] })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'runs' } })).body
        .id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const newConversation = async (): Promise<string> =>
      (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body
        .id
    const setScript = (...turns: ScriptedTurn[]): void => model.setTurns(turns)

    it('lists models', async () => {
      const models = await server.request('GET', '/api/models', { token: alice.token })
      expect(models.body.items).toEqual([
        { id: 'scripted-test', provider: 'scripted', supportsTools: true, contextWindow: 128000, default: true },
      ])
    })

    it('streams a text-only run over SSE from the POST itself and stores the transcript', async () => {
      const conversationId = await newConversation()
      setScript({ text: 'Hello there, how can I help?' })
      const response = await fetch(`${server.url}/api/conversations/${conversationId}/runs`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${alice.token}`,
          'content-type': 'application/json',
          accept: 'text/event-stream',
        },
        body: JSON.stringify({ input: 'hi' }),
      })
      expect(response.status).toBe(201)
      const text = await response.text() // the stream ends after the terminal event
      const types = [...text.matchAll(/^event: (.+)$/gm)].map((match) => match[1])
      expect(types[0]).toBe('run.created')
      expect(types.at(-1)).toBe('run.completed')
      expect(types).toEqual(
        expect.arrayContaining([
          'round.started',
          'message.created',
          'message.delta',
          'message.completed',
          'run.status',
        ]),
      )
      const deltas = [...text.matchAll(/^event: message\.delta\ndata: (.+)$/gm)]
        .map((match) => JSON.parse(match[1]!).text)
        .join('')
      expect(deltas).toBe('Hello there, how can I help?')
      const messages = await server.request('GET', `/api/conversations/${conversationId}/messages`, {
        token: alice.token,
      })
      expect(
        messages.body.items.map((message: { role: string; content: string; status: string }) => [
          message.role,
          message.content,
          message.status,
        ]),
      ).toEqual([
        ['user', 'hi', 'completed'],
        ['assistant', 'Hello there, how can I help?', 'completed'],
      ])
    })

    it('dispatches an exposed command through the bus with the agent entrance; its audit equals a button dispatch but for entrance and actor', async () => {
      const conversationId = await newConversation()
      setScript(
        { text: 'Checking.', toolCalls: [{ name: 'rdm__ping', arguments: { target: 'db-9' } }] },
        { text: 'It answered.' },
      )
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'ping db-9' },
      })
      expect(created.status).toBe(201)
      const run = await waitForRun(server, alice.token, created.body.id, ['completed'])
      expect(run.iteration).toBe(2)
      // The model's second request carried the tool result.
      const second = model.calls.at(-1)!
      const toolMessage = second.messages.find((message) => message.role === 'tool')
      expect(JSON.parse((toolMessage as { content: string }).content)).toMatchObject({ pong: true, target: 'db-9' })
      expect(second.tools.map((tool) => tool.name)).toEqual(
        expect.arrayContaining(['rdm__ping', 'rdm__trace', 'rdm__baseline', 'rdm__draft__compose', 'list_projects']),
      )
      expect(second.tools.map((tool) => tool.name)).not.toContain('rdm__member__add')

      const button = await server.request('POST', '/api/commands/rdm.ping', {
        token: alice.token,
        body: { entrance: 'button', conversationId, params: { target: 'db-9' } },
      })
      const audit = (
        await server.request('GET', `/api/audit?conversationId=${conversationId}&commandId=rdm.ping`, {
          token: alice.token,
        })
      ).body.items
      const agentEnvelope = audit.find((item: { entrance: string }) => item.entrance === 'agent')
      const buttonEnvelope = audit.find((item: { id: string }) => item.id === button.body.dispatchId)
      expect(agentEnvelope.actor).toEqual({ type: 'agent', id: created.body.id, onBehalfOf: alice.user.id })
      // Everything but who, where from, when, and the result's timestamp must be equal.
      const differing = new Set([
        'id',
        'entrance',
        'actor',
        'runId',
        'callId',
        'timings',
        'history',
        'result',
        'resultHash',
      ])
      const strip = (envelope: Record<string, unknown>) =>
        Object.fromEntries(Object.entries(envelope).filter(([key]) => !differing.has(key)))
      expect(strip(agentEnvelope)).toEqual(strip(buttonEnvelope))
      expect(Object.keys(agentEnvelope).sort()).toEqual(Object.keys(buttonEnvelope).sort())
      await expectLedgerInvariant(store, conversationId)
    })

    it('pauses a high-risk call for a human: requires_action, then approve → runs once → completes', async () => {
      const conversationId = await newConversation()
      setScript(
        { toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'Notes', body: 'b' } }] },
        { text: 'Draft written.' },
      )
      const stream = await openSse(`${server.url}/api/conversations/${conversationId}/events`, { token: alice.token })
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'write it up' },
      })
      const waiting = await waitForRun(server, alice.token, created.body.id, ['requires_action'])
      const required = waiting.requiredAction as {
        decisions: Array<{ decisionId: string; callId: string }>
        toolOutputs: unknown[]
      }
      expect(required.decisions).toHaveLength(1)
      expect(required.toolOutputs).toEqual([])
      // A second message while it waits: 409 run_active naming the run and what it awaits.
      const busy = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'again' },
      })
      expect(busy.status).toBe(409)
      expect(busy.body).toMatchObject({
        code: 'run_active',
        activeRunId: created.body.id,
        activeStatus: 'requires_action',
      })
      const approved = await server.request('POST', `/api/decisions/${required.decisions[0]!.decisionId}`, {
        token: alice.token,
        body: { decision: 'approve' },
      })
      expect(approved.status).toBe(200)
      await waitForRun(server, alice.token, created.body.id, ['completed'])
      await stream.waitForEvent((event) => event.event === 'run.completed' && event.data.runId === created.body.id, {
        what: 'run.completed',
      })
      const events: SseEvent[] = stream.events
      stream.close()
      const types = events.map((event) => event.event)
      expect(types).toEqual(
        expect.arrayContaining([
          'tool_call.created',
          'decision.required',
          'decision.resolved',
          'tool_call.completed',
          'run.completed',
        ]),
      )
      expect(types.indexOf('decision.required')).toBeLessThan(types.indexOf('decision.resolved'))
      const completed = events.find((event) => event.event === 'tool_call.completed')!
      expect(completed.data).toMatchObject({
        callId: required.decisions[0]!.callId,
        status: 'ok',
        durationMs: expect.any(Number),
      })
      const drafts = await testDb(store)
        .selectFrom('knowledge_items')
        .select('id')
        .where('project_id', '=', projectId)
        .execute()
      expect(drafts.length).toBeGreaterThanOrEqual(1)
      await expectLedgerInvariant(store, conversationId)
      const metrics = (await server.request('GET', '/metrics')).body as string
      expect(metrics).toMatch(/plinth_runs_total\{status="completed"\} [1-9]/)
      expect(metrics).toMatch(/plinth_tool_calls_total\{status="ok"\} [1-9]/)
      expect(metrics).toMatch(/plinth_decisions_total\{outcome="approved"\} [1-9]/)
      expect(metrics).toMatch(/plinth_llm_call_duration_seconds_count\{model="scripted-test",outcome="ok"\} [1-9]/)
    })

    it('tells the model a rejected call was rejected and continues', async () => {
      const conversationId = await newConversation()
      setScript(
        { toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'No', body: 'b' } }] },
        { text: 'Understood, not writing it.' },
      )
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'write' },
      })
      const waiting = await waitForRun(server, alice.token, created.body.id, ['requires_action'])
      const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!
        .decisionId
      await server.request('POST', `/api/decisions/${decisionId}`, { token: alice.token, body: { decision: 'reject' } })
      await waitForRun(server, alice.token, created.body.id, ['completed'])
      const toolMessage = model.calls.at(-1)!.messages.find((message) => message.role === 'tool') as { content: string }
      expect(JSON.parse(toolMessage.content)).toEqual({ accepted: false, rejected: true })
      await expectLedgerInvariant(store, conversationId)
    })

    it('gives the model readable errors for an unknown tool and invalid arguments', async () => {
      const conversationId = await newConversation()
      setScript(
        {
          toolCalls: [
            { name: 'no_such_tool', arguments: {} },
            { name: 'rdm__trace', arguments: '{not json' },
            { name: 'rdm__trace', arguments: { traceId: 42 } },
          ],
        },
        { text: 'Sorry.' },
      )
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'go' },
      })
      await waitForRun(server, alice.token, created.body.id, ['completed'])
      const results = model.calls
        .at(-1)!
        .messages.filter((message) => message.role === 'tool')
        .map((message) => JSON.parse((message as { content: string }).content))
      expect(results[0].error.code).toBe('unknown_tool')
      expect(results[1].error.code).toBe('invalid_arguments')
      expect(results[2].error.code).toBe('validation_failed')
      await expectLedgerInvariant(store, conversationId)
    })

    it('reuses an identical read-only call within a run and stops at the iteration cap with a final tool-less answer', async () => {
      const conversationId = await newConversation()
      const call = { name: 'rdm__trace', arguments: { traceId: 'abc' } }
      setScript(
        { toolCalls: [call] },
        { toolCalls: [call] },
        { toolCalls: [call] },
        { text: 'Giving up: the limit was reached.' },
      )
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'loop', maxIterations: 3 },
      })
      const run = await waitForRun(server, alice.token, created.body.id, ['completed'])
      expect(run.iteration).toBe(4)
      expect(model.calls.at(-1)!.tools).toEqual([])
      const calls = await testDb(store)
        .selectFrom('run_tool_calls')
        .select(['id', 'status', 'repeat_of'])
        .where('run_id', '=', created.body.id)
        .orderBy('iteration')
        .execute()
      expect(calls).toHaveLength(3)
      expect(calls[1]!.repeat_of).toBe(calls[0]!.id)
      const dispatches = await testDb(store)
        .selectFrom('dispatches')
        .select('id')
        .where('run_id', '=', created.body.id)
        .execute()
      expect(dispatches).toHaveLength(1)
      await expectLedgerInvariant(store, conversationId)
    })

    it('fails a run with iteration_cap when the tool-less last call still asks for tools, answering those calls', async () => {
      const conversationId = await newConversation()
      setScript(
        { toolCalls: [{ name: 'rdm__trace', arguments: { traceId: 'a' } }] },
        { toolCalls: [{ name: 'rdm__trace', arguments: { traceId: 'b' } }] },
        {
          text: 'still trying',
          toolCalls: [{ name: 'rdm__trace', arguments: { traceId: 'c' } }],
          evenWithoutTools: true,
        },
      )
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'loop', maxIterations: 2 },
      })
      const run = await waitForRun(server, alice.token, created.body.id, ['failed', 'completed'])
      expect(run).toMatchObject({ status: 'failed', iteration: 3, error: { code: 'iteration_cap' } })
      const events = await fetch(`${server.url}/api/runs/${created.body.id}/events`, {
        headers: { authorization: `Bearer ${alice.token}` },
      }).then((response) => response.text())
      expect(events).toMatch(/event: run\.failed\ndata: .*"iteration_cap"/)
      const calls = await testDb(store)
        .selectFrom('run_tool_calls')
        .select(['status', 'output', 'dispatch_id'])
        .where('run_id', '=', created.body.id)
        .orderBy('iteration')
        .execute()
      expect(calls.map((call) => call.status)).toEqual(['ok', 'ok', 'error'])
      expect(calls[2]).toMatchObject({ output: { error: { code: 'iteration_cap' } }, dispatch_id: null })
      await expectLedgerInvariant(store, conversationId)
      // The conversation takes the next message.
      setScript({ text: 'ok' })
      const next = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'again' },
      })
      expect(next.status).toBe(201)
      await waitForRun(server, alice.token, next.body.id, ['completed'])
    })

    it('cancels a run waiting for a human: its calls are answered, its decision expires; cancelling again is a no-op', async () => {
      const conversationId = await newConversation()
      setScript({ toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'X', body: 'b' } }] })
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'draft' },
      })
      const waiting = await waitForRun(server, alice.token, created.body.id, ['requires_action'])
      const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!
        .decisionId
      // The cancel takes no fields: one sent is refused, and cancels nothing.
      const withReason = await server.request('POST', `/api/runs/${created.body.id}/cancel`, {
        token: alice.token,
        body: { reason: 'bored' },
      })
      expect([withReason.status, withReason.body.code]).toEqual([400, 'validation_failed'])
      const cancelled = await server.request('POST', `/api/runs/${created.body.id}/cancel`, {
        token: alice.token,
        body: {},
      })
      expect(cancelled.body).toMatchObject({ status: 'cancelled', cancelReason: 'cancelled' })
      expect(
        (await server.request('POST', `/api/runs/${created.body.id}/cancel`, { token: alice.token })).body.status,
      ).toBe('cancelled')
      const decision = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'approve' },
      })
      expect([decision.status, decision.body.code]).toEqual([409, 'decision_expired'])
      await expectLedgerInvariant(store, conversationId)
    })

    it('supersedes an active run with ifActive: "interrupt" and queues with "enqueue"', async () => {
      const conversationId = await newConversation()
      setScript(
        { toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'Y', body: 'b' } }] },
        { text: 'second answer' },
        { text: 'third answer' },
      )
      const first = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'one' },
      })
      await waitForRun(server, alice.token, first.body.id, ['requires_action'])
      const second = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'two', ifActive: 'interrupt' },
      })
      expect(second.status).toBe(201)
      expect((await server.request('GET', `/api/runs/${first.body.id}`, { token: alice.token })).body).toMatchObject({
        status: 'cancelled',
        cancelReason: 'superseded',
      })
      const superseded = await testDb(store)
        .selectFrom('run_tool_calls')
        .select(['status', 'decision_id'])
        .where('run_id', '=', first.body.id)
        .execute()
      expect(superseded.map((call) => call.status)).toEqual(['expired'])
      const decision = await testDb(store)
        .selectFrom('decisions')
        .select('status')
        .where('id', '=', superseded[0]!.decision_id!)
        .executeTakeFirstOrThrow()
      expect(decision.status).toBe('expired')
      const third = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'three', ifActive: 'enqueue' },
      })
      expect(third.status).toBe(201)
      await waitForRun(server, alice.token, second.body.id, ['completed'])
      await waitForRun(server, alice.token, third.body.id, ['completed'])
      await expectLedgerInvariant(store, conversationId)
    })

    it('interrupts sent together all start their run: each supersedes the one before', async () => {
      const conversationId = await newConversation()
      setScript(
        ...Array.from({ length: 10 }, () => ({
          toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'Y', body: 'b' } }],
        })),
      )
      const first = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'one' },
      })
      await waitForRun(server, alice.token, first.body.id, ['requires_action'])
      const interrupts = await Promise.all(
        Array.from({ length: 8 }, (_, index) =>
          server.request('POST', `/api/conversations/${conversationId}/runs`, {
            token: alice.token,
            body: { input: `instead ${index}`, ifActive: 'interrupt' },
          }),
        ),
      )
      expect(interrupts.map((answer) => answer.status)).toEqual(Array.from({ length: 8 }, () => 201))
      // One of them is left going; every other run ended superseded.
      const runs = await Promise.all(
        [first, ...interrupts].map((answer) =>
          waitForRun(server, alice.token, answer.body.id, ['requires_action', 'cancelled']),
        ),
      )
      expect(runs.filter((run) => run.status === 'requires_action')).toHaveLength(1)
      for (const run of runs.filter((candidate) => candidate.status === 'cancelled'))
        expect(run.cancelReason).toBe('superseded')
      await server.request('POST', `/api/runs/${runs.find((run) => run.status === 'requires_action')!.id}/cancel`, {
        token: alice.token,
      })
    })

    it('refuses bad run requests: unknown model, invalid client tool, someone else’s conversation', async () => {
      const conversationId = await newConversation()
      const unknown = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'x', model: 'gpt-99' },
      })
      expect([unknown.status, unknown.body.code]).toEqual([422, 'unknown_model'])
      const badTool = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'x', clientTools: [{ name: 'bad name', parameters: {} }] },
      })
      expect([badTool.status, badTool.body.code]).toEqual([400, 'validation_failed'])
      // Each bad field named in `errors`, as for every other validation failure.
      expect(badTool.body.errors).toEqual([
        { path: 'body.clientTools.0.name', message: expect.stringMatching(/^must match/) },
      ])
      // An input of either shape fails with what is wrong with it, not with every alternative.
      const empty = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: '' },
      })
      expect([empty.status, empty.body.code, empty.body.errors]).toEqual([
        400,
        'validation_failed',
        [{ path: 'body.input', message: 'must NOT have fewer than 1 characters' }],
      ])
      const number = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 5 },
      })
      expect(number.body.detail).toBe('body.input: must be string or array')
      const badPart = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: [{ type: 'text' }] },
      })
      expect(badPart.body.errors).not.toContainEqual({ path: 'body.input', message: 'must be string' })
      // A schema that is not JSON Schema deeper down is refused here, not by the provider mid-run.
      const badSchema = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: {
          input: 'x',
          clientTools: [{ name: 'pick', parameters: { type: 'object', properties: { a: { type: 'nonsense' } } } }],
        },
      })
      expect([badSchema.status, badSchema.body.code]).toEqual([400, 'validation_failed'])
      expect(badSchema.body.detail).toMatch(/^body\.clientTools\.0\.parameters: is not valid JSON Schema/)
      expect(badSchema.body.errors).toEqual([
        { path: 'body.clientTools.0.parameters', message: expect.stringMatching(/^is not valid JSON Schema/) },
      ])
      const bob = await server.createUser()
      const foreign = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: bob.token,
        body: { input: 'x' },
      })
      expect(foreign.status).toBe(404)
      expect((await server.request('GET', `/api/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV`, { token: alice.token })).status).toBe(
        404,
      )
    })

    it('waits for client tool outputs (propose_command with its risk) and continues', async () => {
      const conversationId = await newConversation()
      setScript(
        { toolCalls: [{ name: 'propose_command', arguments: { command: 'rm -rf /tmp/cache', reason: 'clean' } }] },
        { text: 'Cleaned.' },
      )
      const stream = await openSse(`${server.url}/api/conversations/${conversationId}/events`, { token: alice.token })
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'clean up', clientTools: ['propose_command'] },
      })
      const waiting = await waitForRun(server, alice.token, created.body.id, ['requires_action'])
      const outputs = (
        waiting.requiredAction as { toolOutputs: Array<{ callId: string; name: string; args: unknown }> }
      ).toolOutputs
      expect(outputs).toEqual([
        {
          callId: expect.any(String),
          name: 'propose_command',
          args: { command: 'rm -rf /tmp/cache', reason: 'clean' },
        },
      ])
      const bogus = await server.request('POST', `/api/runs/${created.body.id}/tool-outputs`, {
        token: alice.token,
        body: { outputs: [{ callId: '01ARZ3NDEKTSV4RRFFQ69G5FAV', output: {} }] },
      })
      expect([bogus.status, bogus.body.code]).toEqual([409, 'run_not_waiting'])
      // An id of another shape is a malformed request, as everywhere.
      const malformed = await server.request('POST', `/api/runs/${created.body.id}/tool-outputs`, {
        token: alice.token,
        body: { outputs: [{ callId: 'nope', output: {} }] },
      })
      expect([malformed.status, malformed.body.code]).toEqual([400, 'validation_failed'])
      await server.request('POST', `/api/runs/${created.body.id}/tool-outputs`, {
        token: alice.token,
        body: { outputs: [{ callId: outputs[0]!.callId, output: { accepted: true } }] },
      })
      await waitForRun(server, alice.token, created.body.id, ['completed'])
      const events = stream.events
      stream.close()
      const proposal = events.find((event) => event.event === 'tool_call.created')!
      expect(proposal.data).toMatchObject({
        kind: 'client',
        risk: 'high',
        matchedRules: [expect.objectContaining({ id: 'recursive_forced_delete' })],
      })
      await expectLedgerInvariant(store, conversationId)
    })

    it('a client tool output answered before the decision beside it narrows requiredAction at once', async () => {
      const conversationId = await newConversation()
      setScript(
        {
          toolCalls: [
            { name: 'rdm__draft__compose', arguments: { title: 'T', body: 'B' } },
            { name: 'propose_command', arguments: { command: 'ls', reason: 'look' } },
          ],
        },
        { text: 'Both done.' },
      )
      const stream = await openSse(`${server.url}/api/conversations/${conversationId}/events`, { token: alice.token })
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'draft and look', clientTools: ['propose_command'] },
      })
      const waiting = await waitForRun(server, alice.token, created.body.id, ['requires_action'])
      const awaited = waiting.requiredAction as {
        decisions: Array<{ decisionId: string }>
        toolOutputs: Array<{ callId: string }>
      }
      expect([awaited.decisions.length, awaited.toolOutputs.length]).toEqual([1, 1])
      const answered = await server.request('POST', `/api/runs/${created.body.id}/tool-outputs`, {
        token: alice.token,
        body: { outputs: [{ callId: awaited.toolOutputs[0]!.callId, output: { accepted: true } }] },
      })
      expect(answered.status).toBe(200)
      // What is awaited now is the decision alone: in the answer, on GET and on the stream.
      expect(answered.body.requiredAction.toolOutputs).toEqual([])
      expect(answered.body.requiredAction.decisions).toHaveLength(1)
      const after = await server.request('GET', `/api/runs/${created.body.id}`, { token: alice.token })
      expect([after.body.status, after.body.requiredAction.toolOutputs]).toEqual(['requires_action', []])
      await waitFor(
        () =>
          stream.events.some(
            (event) =>
              event.event === 'run.status' &&
              (event.data as { requiredAction?: { toolOutputs: unknown[]; decisions: unknown[] } }).requiredAction
                ?.toolOutputs.length === 0 &&
              (event.data as { requiredAction: { decisions: unknown[] } }).requiredAction.decisions.length === 1,
          ),
        { what: 'a run.status awaiting the decision alone' },
      )
      stream.close()
      await server.request('POST', `/api/decisions/${awaited.decisions[0]!.decisionId}`, {
        token: alice.token,
        body: { decision: 'approve' },
      })
      await waitForRun(server, alice.token, created.body.id, ['completed'])
      await expectLedgerInvariant(store, conversationId)
    })
  })
}
