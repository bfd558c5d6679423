import { HttpAgent, type BaseEvent, type Interrupt, type Message } from '@ag-ui/client'
import { EventSchema } from '@ag-ui/core/schemas'
import { Ajv } from 'ajv'
import addFormatsModule from 'ajv-formats'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { ModelError, ScriptedModel, type LanguageModel, type StreamPart } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// AG-UI (docs/ag-ui.md): POST /api/conversations/:id/ag-ui, driven by the real @ag-ui/client HttpAgent
// against a listening server — which also checks the event order AG-UI requires (its verifier).
const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv

/** The document as generated clients read it: an object schema without additionalProperties is closed. */
function closedAsTyped(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(closedAsTyped)
  if (node === null || typeof node !== 'object') return node
  const out: Record<string, unknown> = Object.fromEntries(
    Object.entries(node).map(([key, value]) => [key, closedAsTyped(value)]),
  )
  if (out.type === 'object' && out.properties && !('additionalProperties' in out)) out.additionalProperties = false
  return out
}
const classified = new URL('./__fixtures__/plugins/classified.ts', import.meta.url).pathname

/** A provider that streams a little and then fails upstream. */
const broken: LanguageModel = {
  id: 'broken',
  provider: 'scripted',
  supportsTools: true,
  contextWindow: 128_000,
  async *stream(): AsyncGenerator<StreamPart> {
    yield { type: 'text-delta', text: 'Half an answer' }
    throw new ModelError('upstream_error', 'the provider answered 502', { upstreamStatus: 502 })
  },
}

for (const engine of apiEngines()) {
  describe(`AG-UI over HttpAgent (${engine})`, () => {
    let store: Store
    let server: TestServer
    let model: ScriptedModel
    let alice: TestUser
    let projectId: string

    beforeAll(async () => {
      store = await openTestStore(engine)
      model = new ScriptedModel({ id: 'scripted', turns: [] })
      server = await startTestServer(store, { models: [model, broken], plugins: [classified] })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'ag-ui' } })).body
        .id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const newConversation = async (): Promise<string> =>
      (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body
        .id
    const agentFor = (conversationId: string, token = alice.token): HttpAgent =>
      new HttpAgent({
        url: `${server.url}/api/conversations/${conversationId}/ag-ui`,
        headers: { authorization: `Bearer ${token}` },
        threadId: conversationId,
      })

    /** Runs the agent once, recording every event it applied. */
    async function run(
      agent: HttpAgent,
      parameters: Parameters<HttpAgent['runAgent']>[0] = {},
    ): Promise<{ events: BaseEvent[]; types: string[]; newMessages: Message[] }> {
      const events: BaseEvent[] = []
      const { newMessages } = await agent.runAgent(
        { forwardedProps: { plinth: { knowledge: { autoInject: false } } }, ...parameters },
        { onEvent: ({ event }) => void events.push(event) },
      )
      return { events, types: events.map((event) => event.type), newMessages }
    }
    const ofType = <T = Record<string, unknown>>(events: BaseEvent[], type: string): T[] =>
      events.filter((event) => event.type === type) as T[]

    it('streams a text answer: RUN_STARTED, a step, TEXT_MESSAGE_START/CONTENT/END, RUN_FINISHED; the run is Plinth’s', async () => {
      model.setTurns([{ text: 'Hello from Plinth, streamed in words.' }])
      const conversationId = await newConversation()
      const agent = agentFor(conversationId)
      agent.addMessage({ id: 'u1', role: 'user', content: 'Say hello' })
      const { events, types, newMessages } = await run(agent)
      expect(types).toEqual([
        'RUN_STARTED',
        'STEP_STARTED',
        'TEXT_MESSAGE_START',
        ...types.filter((type) => type === 'TEXT_MESSAGE_CONTENT'),
        'TEXT_MESSAGE_END',
        'STEP_FINISHED',
        'RUN_FINISHED',
      ])
      expect(
        ofType<{ delta: string }>(events, 'TEXT_MESSAGE_CONTENT')
          .map((event) => event.delta)
          .join(''),
      ).toBe('Hello from Plinth, streamed in words.')
      const started = ofType<{ threadId: string; runId: string; metadata: { plinth: { runId: string } } }>(
        events,
        'RUN_STARTED',
      )[0]!
      expect(started.threadId).toBe(conversationId)
      const finished = ofType<{ outcome: unknown; runId: string; usage: Array<{ model: string }> }>(
        events,
        'RUN_FINISHED',
      )[0]!
      expect(finished).toMatchObject({
        runId: started.runId,
        outcome: { type: 'success' },
        usage: [{ model: 'scripted' }],
      })
      expect(newMessages).toEqual([
        expect.objectContaining({ role: 'assistant', content: 'Hello from Plinth, streamed in words.' }),
      ])
      // The AG-UI run is a Plinth run: same transcript, same answer.
      const plinthRun = (
        await server.request('GET', `/api/runs/${started.metadata.plinth.runId}`, { token: alice.token })
      ).body
      expect(plinthRun).toMatchObject({ status: 'completed', conversationId })
      const transcript = (
        await server.request('GET', `/api/conversations/${conversationId}/messages`, { token: alice.token })
      ).body.items
      expect(transcript.map((message: { role: string; content: string }) => [message.role, message.content])).toEqual([
        ['user', 'Say hello'],
        ['assistant', 'Hello from Plinth, streamed in words.'],
      ])
    })

    it('a tool call with its result: TOOL_CALL_START/ARGS/END, TOOL_CALL_RESULT, the next round’s answer', async () => {
      model.setTurns([
        { text: 'Touching.', toolCalls: [{ name: 'classified__touch', arguments: { path: 'notes.txt' } }] },
        { text: 'Touched notes.txt.' },
      ])
      const conversationId = await newConversation()
      const agent = agentFor(conversationId)
      agent.addMessage({ id: 'u1', role: 'user', content: 'Touch notes' })
      const { events, types } = await run(agent)
      expect(types.filter((type) => type !== 'TEXT_MESSAGE_CONTENT')).toEqual([
        'RUN_STARTED',
        'STEP_STARTED',
        'TEXT_MESSAGE_START',
        'TEXT_MESSAGE_END',
        'TOOL_CALL_START',
        'TOOL_CALL_ARGS',
        'TOOL_CALL_END',
        'TOOL_CALL_RESULT',
        'STEP_FINISHED',
        'STEP_STARTED',
        'TEXT_MESSAGE_START',
        'TEXT_MESSAGE_END',
        'STEP_FINISHED',
        'RUN_FINISHED',
      ])
      expect(ofType(events, 'STEP_STARTED').map((event) => event.stepName)).toEqual(['round 1', 'round 2'])
      const start = ofType<{ toolCallId: string; toolCallName: string; parentMessageId: string }>(
        events,
        'TOOL_CALL_START',
      )[0]!
      expect(start.toolCallName).toBe('classified__touch')
      expect(JSON.parse(String(ofType(events, 'TOOL_CALL_ARGS')[0]!.delta))).toEqual({ path: 'notes.txt' })
      const result = ofType<{ toolCallId: string; content: string }>(events, 'TOOL_CALL_RESULT')[0]!
      expect(result.toolCallId).toBe(start.toolCallId)
      expect(JSON.parse(result.content)).toEqual({ touched: 'notes.txt' })
      // The client's thread now holds the assistant message with its call, the result and the answer.
      const roles = agent.messages.map((message) => message.role)
      expect(roles).toEqual(['user', 'assistant', 'tool', 'assistant'])
      const withCall = agent.messages.find((message) => message.id === start.parentMessageId) as {
        toolCalls?: Array<{ id: string }>
      }
      expect(withCall.toolCalls?.map((call) => call.id)).toEqual([start.toolCallId])
    })

    it('a high-risk call interrupts (RUN_FINISHED with the decision), a resume that approves it continues the same run to its end', async () => {
      model.setTurns([
        { toolCalls: [{ name: 'classified__touch', arguments: { path: '/etc/hosts' } }] },
        { text: 'Touched /etc/hosts.' },
      ])
      const conversationId = await newConversation()
      const agent = agentFor(conversationId)
      agent.addMessage({ id: 'u1', role: 'user', content: 'Touch hosts' })
      let interrupts: Interrupt[] = []
      const first = await run(agent, {})
      expect(first.types).toEqual([
        'RUN_STARTED',
        'STEP_STARTED',
        'TOOL_CALL_START',
        'TOOL_CALL_ARGS',
        'TOOL_CALL_END',
        'STEP_FINISHED',
        'RUN_FINISHED',
      ])
      const finished = ofType<{
        outcome: { type: string; interrupts: Interrupt[] }
        metadata: { plinth: { runId: string } }
      }>(first.events, 'RUN_FINISHED')[0]!
      expect(finished.outcome.type).toBe('interrupt')
      interrupts = finished.outcome.interrupts
      const call = ofType<{ toolCallId: string }>(first.events, 'TOOL_CALL_START')[0]!
      const plinthRun = (
        await server.request('GET', `/api/runs/${finished.metadata.plinth.runId}`, { token: alice.token })
      ).body
      expect(plinthRun.status).toBe('requires_action')
      // The interrupt is the run's decision: its id, the call it gates, what an answer looks like.
      expect(interrupts).toEqual([
        expect.objectContaining({
          id: plinthRun.requiredAction.decisions[0].decisionId,
          reason: 'tool_approval',
          toolCallId: call.toolCallId,
          expiresAt: expect.any(String),
          responseSchema: expect.objectContaining({ required: ['decision'] }),
        }),
      ])
      expect(agent.pendingInterrupts.map((interrupt) => interrupt.id)).toEqual([interrupts[0]!.id])
      const second = await run(agent, {
        resume: [{ interruptId: interrupts[0]!.id, status: 'resolved', payload: { decision: 'approve' } }],
      })
      expect(second.types.filter((type) => type !== 'TEXT_MESSAGE_CONTENT')).toEqual([
        'RUN_STARTED',
        'STEP_STARTED',
        'TOOL_CALL_RESULT',
        'STEP_FINISHED',
        'STEP_STARTED',
        'TEXT_MESSAGE_START',
        'TEXT_MESSAGE_END',
        'STEP_FINISHED',
        'RUN_FINISHED',
      ])
      expect(ofType(second.events, 'RUN_STARTED')[0]!.metadata).toEqual({ plinth: { runId: plinthRun.id } })
      expect(JSON.parse(String(ofType(second.events, 'TOOL_CALL_RESULT')[0]!.content))).toEqual({
        touched: '/etc/hosts',
      })
      expect(ofType(second.events, 'RUN_FINISHED')[0]!.outcome).toEqual({ type: 'success' })
      expect(agent.pendingInterrupts).toEqual([])
      expect((await server.request('GET', `/api/runs/${plinthRun.id}`, { token: alice.token })).body.status).toBe(
        'completed',
      )
      const decision = (await server.request('GET', `/api/decisions/${interrupts[0]!.id}`, { token: alice.token })).body
      expect(decision).toMatchObject({ status: 'approved' })
    })

    it('a resume that rejects (or cancels the interrupt): the call is answered rejected and the model goes on', async () => {
      for (const answer of [
        { status: 'resolved' as const, payload: { decision: 'reject', note: 'not today' } },
        { status: 'cancelled' as const },
      ]) {
        model.setTurns([
          { toolCalls: [{ name: 'classified__touch', arguments: { path: '/etc/motd' } }] },
          { text: 'Understood, I left it alone.' },
        ])
        const conversationId = await newConversation()
        const agent = agentFor(conversationId)
        agent.addMessage({ id: 'u1', role: 'user', content: 'Touch motd' })
        await run(agent)
        const interrupt = agent.pendingInterrupts[0]!
        const second = await run(agent, { resume: [{ interruptId: interrupt.id, ...answer }] })
        const result = ofType<{ content: string; metadata: unknown }>(second.events, 'TOOL_CALL_RESULT')[0]!
        expect(result.metadata).toEqual({ plinth: { status: 'rejected' } })
        expect(JSON.parse(result.content)).toMatchObject({ accepted: false, rejected: true })
        expect(
          ofType<{ delta: string }>(second.events, 'TEXT_MESSAGE_CONTENT')
            .map((event) => event.delta)
            .join(''),
        ).toBe('Understood, I left it alone.')
        expect(ofType(second.events, 'RUN_FINISHED')[0]!.outcome).toEqual({ type: 'success' })
        expect(
          (await server.request('GET', `/api/decisions/${interrupt.id}`, { token: alice.token })).body.status,
        ).toBe('rejected')
      }
    })

    it('frontend tools are client tools: the run finishes with the call pending, a tool message answers it and the run goes on', async () => {
      model.setTurns([
        { toolCalls: [{ name: 'pick_color', arguments: { palette: 'warm' } }] },
        { text: 'You picked orange.' },
      ])
      const conversationId = await newConversation()
      const agent = agentFor(conversationId)
      agent.addMessage({ id: 'u1', role: 'user', content: 'Pick a color' })
      const tools = [
        {
          name: 'pick_color',
          description: 'Ask the user for a color',
          parameters: { type: 'object', properties: { palette: { type: 'string' } } },
        },
      ]
      const first = await run(agent, { tools })
      expect(model.calls.at(-1)!.tools.map((tool) => tool.name)).toContain('pick_color')
      const call = ofType<{ toolCallId: string; toolCallName: string }>(first.events, 'TOOL_CALL_START')[0]!
      expect(call.toolCallName).toBe('pick_color')
      expect(ofType(first.events, 'RUN_FINISHED')[0]!.outcome).toEqual({
        type: 'success',
        pendingToolCallIds: [call.toolCallId],
      })
      agent.addMessage({
        id: 't1',
        role: 'tool',
        toolCallId: call.toolCallId,
        content: JSON.stringify({ color: 'orange' }),
      })
      const second = await run(agent, { tools })
      // The client already holds the result it sent: no TOOL_CALL_RESULT repeats it.
      expect(second.types.filter((type) => type !== 'TEXT_MESSAGE_CONTENT')).toEqual([
        'RUN_STARTED',
        'STEP_STARTED',
        'STEP_FINISHED',
        'STEP_STARTED',
        'TEXT_MESSAGE_START',
        'TEXT_MESSAGE_END',
        'STEP_FINISHED',
        'RUN_FINISHED',
      ])
      const lastRequest = model.calls.at(-1)!.messages
      expect(lastRequest.find((message) => message.role === 'tool')).toMatchObject({
        content: expect.stringContaining('orange'),
      })
      expect(agent.messages.map((message) => message.role)).toEqual(['user', 'assistant', 'tool', 'assistant'])
    })

    it('a frontend tool call carries its evaluated risk, on its TOOL_CALL_START and on its interrupt', async () => {
      model.setTurns([
        {
          toolCalls: [
            { name: 'classified__touch', arguments: { path: '/etc/hosts' } },
            { name: 'propose_command', arguments: { command: 'rm -rf /' } },
          ],
        },
        { text: 'Done.' },
      ])
      const agent = agentFor(await newConversation())
      agent.addMessage({ id: 'u1', role: 'user', content: 'Clean up' })
      const tools = [
        {
          name: 'propose_command',
          description: 'Propose a shell command',
          parameters: { type: 'object', properties: { command: { type: 'string' } } },
        },
      ]
      const first = await run(agent, { tools })
      const starts = ofType<{ toolCallId: string; toolCallName: string; metadata?: unknown }>(
        first.events,
        'TOOL_CALL_START',
      )
      const proposed = starts.find((event) => event.toolCallName === 'propose_command')!
      expect(proposed.metadata).toEqual({
        plinth: { kind: 'client', risk: 'high', matchedRules: expect.arrayContaining([expect.anything()]) },
      })
      const { interrupts } = ofType<{ outcome: { interrupts: Interrupt[] } }>(first.events, 'RUN_FINISHED')[0]!.outcome
      const clientInterrupt = interrupts.find((interrupt) => interrupt.reason === 'client_tool')!
      expect(clientInterrupt.metadata).toMatchObject({
        plinth: { name: 'propose_command', risk: 'high', matchedRules: expect.arrayContaining([expect.anything()]) },
      })
    })

    it('on the wire: `data:`-only SSE frames, each a valid AG-UI event (@ag-ui/core) that fits the OpenAPI AgUiEvent schema', async () => {
      model.setTurns([
        {
          text: 'Checking.',
          toolCalls: [
            { name: 'classified__touch', arguments: { path: 'a.txt' } },
            { name: 'classified__touch', arguments: { path: '/etc/b' } },
          ],
        },
        { text: 'Done.' },
      ])
      const conversationId = await newConversation()
      const post = async (
        body: Record<string, unknown>,
      ): Promise<{ raw: string; events: Array<Record<string, unknown>> }> => {
        const response = await fetch(`${server.url}/api/conversations/${conversationId}/ag-ui`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${alice.token}`,
            'content-type': 'application/json',
            accept: 'text/event-stream',
          },
          body: JSON.stringify({
            threadId: conversationId,
            runId: `r${Date.now()}`,
            tools: [],
            context: [],
            forwardedProps: { plinth: { knowledge: { autoInject: false } } },
            ...body,
          }),
        })
        expect(response.status).toBe(200)
        expect(response.headers.get('content-type')).toContain('text/event-stream')
        const raw = await response.text()
        const frames = raw.split('\n\n').filter((frame) => frame.startsWith('data: '))
        return {
          raw,
          events: frames.map((frame) => JSON.parse(frame.slice('data: '.length)) as Record<string, unknown>),
        }
      }
      const first = await post({ messages: [{ id: 'u1', role: 'user', content: 'Touch two' }] })
      const interrupt = (first.events.at(-1)!.outcome as { interrupts: Array<{ id: string }> }).interrupts[0]!
      // The thread as a client keeps it: the assistant's two calls and the result of the one that ran
      // (a trailing tool message for a call Plinth ran itself is history, not an answer).
      const starts = first.events.filter((event) => event.type === 'TOOL_CALL_START') as Array<{
        toolCallId: string
        toolCallName: string
        parentMessageId: string
      }>
      const args = new Map(
        first.events
          .filter((event) => event.type === 'TOOL_CALL_ARGS')
          .map((event) => [event.toolCallId as string, event.delta as string]),
      )
      const ran = first.events.find((event) => event.type === 'TOOL_CALL_RESULT') as {
        toolCallId: string
        content: string
      }
      const thread = [
        { id: 'u1', role: 'user', content: 'Touch two' },
        {
          id: starts[0]!.parentMessageId,
          role: 'assistant',
          toolCalls: starts.map((start) => ({
            id: start.toolCallId,
            type: 'function',
            function: { name: start.toolCallName, arguments: args.get(start.toolCallId) },
          })),
        },
        { id: 'r1', role: 'tool', toolCallId: ran.toolCallId, content: ran.content },
      ]
      const second = await post({
        messages: thread,
        resume: [
          { interruptId: interrupt.id, status: 'resolved', payload: { decision: 'approve_session', note: 'fine' } },
        ],
      })
      const document = (await server.request('GET', '/docs/json')).body
      const validate = addFormats(new Ajv({ strict: false, allErrors: true })).compile({
        $ref: '#/components/schemas/AgUiEvent',
        components: closedAsTyped(document.components),
      })
      for (const { raw, events } of [first, second]) {
        // Only `data:` frames (and heartbeat comments): no `event:` or `id:` lines an AG-UI client would not read.
        expect(
          raw.split('\n').filter((line) => line !== '' && !line.startsWith('data: ') && !line.startsWith(':')),
        ).toEqual([])
        for (const event of events) {
          expect(EventSchema.safeParse(event).error?.issues ?? [], JSON.stringify(event)).toEqual([])
          expect(validate(event) ? [] : validate.errors, JSON.stringify(event)).toEqual([])
        }
      }
      expect(second.events.map((event) => event.type).filter((type) => type !== 'TEXT_MESSAGE_CONTENT')).toEqual([
        'RUN_STARTED',
        'STEP_STARTED',
        'TOOL_CALL_RESULT',
        'STEP_FINISHED',
        'STEP_STARTED',
        'TEXT_MESSAGE_START',
        'TEXT_MESSAGE_END',
        'STEP_FINISHED',
        'RUN_FINISHED',
      ])
    })

    it('a run that fails upstream ends with RUN_ERROR (its code and message); the text so far was streamed and closed', async () => {
      const conversationId = await newConversation()
      const agent = agentFor(conversationId)
      agent.addMessage({ id: 'u1', role: 'user', content: 'Try the broken model' })
      const errors: Array<Record<string, unknown>> = []
      const events: BaseEvent[] = []
      await agent
        .runAgent(
          { forwardedProps: { plinth: { model: 'broken', knowledge: { autoInject: false } } } },
          { onEvent: ({ event }) => void events.push(event), onRunErrorEvent: ({ event }) => void errors.push(event) },
        )
        .catch(() => undefined)
      expect(events.map((event) => event.type)).toEqual([
        'RUN_STARTED',
        'STEP_STARTED',
        'TEXT_MESSAGE_START',
        'TEXT_MESSAGE_CONTENT',
        'TEXT_MESSAGE_END',
        'STEP_FINISHED',
        'RUN_ERROR',
      ])
      expect(errors).toEqual([
        expect.objectContaining({ code: 'upstream_error', message: 'the provider answered 502' }),
      ])
    })

    it('a run budget in forwardedProps.plinth holds: the run that would pass it ends RUN_ERROR budget_exceeded', async () => {
      model.setTurns([
        { text: 'Touching.', toolCalls: [{ name: 'classified__touch', arguments: { path: 'a.txt' } }] },
        { text: 'Touching again.', toolCalls: [{ name: 'classified__touch', arguments: { path: 'b.txt' } }] },
        { text: 'Done.' },
      ])
      const conversationId = await newConversation()
      const agent = agentFor(conversationId)
      agent.addMessage({ id: 'u1', role: 'user', content: 'Touch twice' })
      const errors: Array<Record<string, unknown>> = []
      const events: BaseEvent[] = []
      await agent
        .runAgent(
          { forwardedProps: { plinth: { budget: { maxModelCalls: 1 }, knowledge: { autoInject: false } } } },
          { onEvent: ({ event }) => void events.push(event), onRunErrorEvent: ({ event }) => void errors.push(event) },
        )
        .catch(() => undefined)
      expect(errors).toEqual([expect.objectContaining({ code: 'budget_exceeded' })])
      const runId = ofType<{ metadata: { plinth: { runId: string } } }>(events, 'RUN_STARTED')[0]!.metadata.plinth.runId
      const plinthRun = (await server.request('GET', `/api/runs/${runId}`, { token: alice.token })).body
      expect(plinthRun).toMatchObject({
        status: 'failed',
        budget: { maxModelCalls: 1 },
        error: { code: 'budget_exceeded' },
        usage: { modelCalls: 1 },
      })
    })

    it('stop is Plinth’s cancel: RUN_FINISHED with the cancelled outcome', async () => {
      model.setTurns([{ text: 'a b c d e f g h i j k l m n o p q r s t u v w x y z', delayMs: 200 }])
      const conversationId = await newConversation()
      const agent = agentFor(conversationId)
      agent.addMessage({ id: 'u1', role: 'user', content: 'Talk slowly' })
      const events: BaseEvent[] = []
      const running = agent.runAgent(
        { forwardedProps: { plinth: { knowledge: { autoInject: false } } } },
        {
          onEvent: ({ event }) => {
            events.push(event)
            // The client cancels the Plinth run named in RUN_STARTED once text flows.
            if (
              event.type === 'TEXT_MESSAGE_CONTENT' &&
              events.filter((seen) => seen.type === 'TEXT_MESSAGE_CONTENT').length === 1
            ) {
              const plinthRunId = (events[0]!.metadata as { plinth: { runId: string } }).plinth.runId
              void server.request('POST', `/api/runs/${plinthRunId}/cancel`, { token: alice.token })
            }
          },
        },
      )
      await running
      expect(events.at(-1)).toMatchObject({
        type: 'RUN_FINISHED',
        outcome: { type: 'cancelled' },
        metadata: { plinth: { reason: 'cancelled' } },
      })
      expect(events.map((event) => event.type)).toContain('TEXT_MESSAGE_END')
    })

    describe('bad input: problem+json with a stable code, nothing started', () => {
      const post = (conversationId: string, body: unknown, token = alice.token) =>
        server.request('POST', `/api/conversations/${conversationId}/ag-ui`, {
          token,
          body,
          headers: { accept: 'text/event-stream' },
        })
      const input = (conversationId: string, extra: Record<string, unknown> = {}) => ({
        threadId: conversationId,
        runId: 'r1',
        messages: [{ id: 'u1', role: 'user', content: 'hi' }],
        tools: [],
        context: [],
        ...extra,
      })

      it('HttpAgent sees the refusal: a threadId that is not the conversation', async () => {
        const conversationId = await newConversation()
        const agent = new HttpAgent({
          url: `${server.url}/api/conversations/${conversationId}/ag-ui`,
          headers: { authorization: `Bearer ${alice.token}` },
        })
        agent.addMessage({ id: 'u1', role: 'user', content: 'hi' })
        // The client logs the failure before it rejects; the rejection is what is checked.
        const quiet = vi.spyOn(console, 'error').mockImplementation(() => undefined)
        const failure = (await agent
          .runAgent()
          .catch((error: unknown) => error)
          .finally(() => quiet.mockRestore())) as { status: number; payload: string }
        expect(failure.status).toBe(400)
        expect(JSON.parse(failure.payload)).toMatchObject({ status: 400, code: 'thread_mismatch' })
      })

      it('malformed input, unknown tools and answers to nothing', async () => {
        const conversationId = await newConversation()
        const cases: Array<[string, unknown, number, string]> = [
          [
            'unknown role',
            input(conversationId, { messages: [{ id: 'u1', role: 'robot', content: 'hi' }] }),
            400,
            'validation_failed',
          ],
          ['no runId', { threadId: conversationId, messages: [] }, 400, 'validation_failed'],
          [
            'tool message without toolCallId',
            input(conversationId, { messages: [{ id: 't1', role: 'tool', content: 'x' }] }),
            400,
            'validation_failed',
          ],
          ['unknown top-level field', input(conversationId, { bogus: 1 }), 400, 'validation_failed'],
          [
            'unknown Plinth option',
            input(conversationId, { forwardedProps: { plinth: { temperature: 3 } } }),
            400,
            'validation_failed',
          ],
          [
            'a tool Plinth cannot offer (name)',
            input(conversationId, { tools: [{ name: 'bad name!', description: 'x' }] }),
            400,
            'invalid_tool',
          ],
          [
            'a tool Plinth cannot offer (schema)',
            input(conversationId, { tools: [{ name: 'ok', description: 'x', parameters: { type: 'string' } }] }),
            400,
            'invalid_tool',
          ],
          [
            'a tool Plinth cannot offer (a schema invalid inside)',
            input(conversationId, {
              tools: [
                {
                  name: 'get_color',
                  description: 'x',
                  parameters: { type: 'object', properties: { a: { type: 'nonsense' } } },
                },
              ],
            }),
            400,
            'invalid_tool',
          ],
          [
            'the same tool twice',
            input(conversationId, {
              tools: [
                { name: 'a', description: 'x' },
                { name: 'a', description: 'y' },
              ],
            }),
            400,
            'invalid_tool',
          ],
          [
            'a frontend tool named like a Plinth tool',
            input(conversationId, { tools: [{ name: 'classified__touch', description: 'x' }] }),
            422,
            'client_tool_conflict',
          ],
          [
            'no user message last',
            input(conversationId, { messages: [{ id: 'a1', role: 'assistant', content: 'hello' }] }),
            400,
            'no_input',
          ],
          [
            'an image part',
            input(conversationId, {
              messages: [
                {
                  id: 'u1',
                  role: 'user',
                  content: [{ type: 'image', source: { type: 'url', value: 'https://example.invalid/a.png' } }],
                },
              ],
            }),
            400,
            'unsupported_content',
          ],
          [
            'a resume with no waiting run',
            input(conversationId, {
              resume: [{ interruptId: 'x', status: 'resolved', payload: { decision: 'approve' } }],
            }),
            409,
            'run_not_waiting',
          ],
          ['a threadId of another conversation', input('01ARZ3NDEKTSV4RRFFQ69G5FAV'), 400, 'thread_mismatch'],
        ]
        for (const [name, body, status, code] of cases) {
          const answer = await post(conversationId, body)
          expect([name, answer.status, answer.body.code], JSON.stringify(answer.body)).toEqual([name, status, code])
          expect(answer.headers.get('content-type'), name).toContain('application/problem+json')
        }
        expect(
          (await server.request('GET', `/api/conversations/${conversationId}/runs`, { token: alice.token })).body.items,
        ).toEqual([])
        const stranger = await server.createUser()
        expect((await post(conversationId, input(conversationId), stranger.token)).status).toBe(404)
      })

      it('answers to a waiting run: an unknown interrupt, a result for a call never made, a partial answer, a bad decision', async () => {
        model.setTurns([
          {
            toolCalls: [
              { name: 'classified__touch', arguments: { path: '/etc/a' } },
              { name: 'classified__touch', arguments: { path: '/etc/b' } },
            ],
          },
          { text: 'done' },
        ])
        const conversationId = await newConversation()
        const agent = agentFor(conversationId)
        agent.addMessage({ id: 'u1', role: 'user', content: 'Touch two' })
        await run(agent)
        const [one, two] = agent.pendingInterrupts.map((interrupt) => interrupt.id)
        const messages = agent.messages
        const resume = (entries: unknown[]) => input(conversationId, { messages, resume: entries })
        const cases: Array<[string, unknown, number, string]> = [
          [
            'unknown interrupt',
            resume([{ interruptId: 'nope', status: 'resolved', payload: { decision: 'approve' } }]),
            400,
            'unknown_interrupt',
          ],
          [
            'partial',
            resume([{ interruptId: one, status: 'resolved', payload: { decision: 'approve' } }]),
            400,
            'incomplete_resume',
          ],
          [
            'bad decision',
            resume([
              { interruptId: one, status: 'resolved', payload: { decision: 'maybe' } },
              { interruptId: two, status: 'cancelled' },
            ]),
            400,
            'validation_failed',
          ],
          [
            'twice',
            resume([
              { interruptId: one, status: 'cancelled' },
              { interruptId: one, status: 'cancelled' },
              { interruptId: two, status: 'cancelled' },
            ]),
            400,
            'validation_failed',
          ],
          [
            'a result for a call never made',
            input(conversationId, {
              messages: [...messages, { id: 't9', role: 'tool', toolCallId: 'call-nobody-made', content: '{}' }],
            }),
            400,
            'unknown_tool_call',
          ],
          [
            'a new message while it waits',
            input(conversationId, { messages: [...messages, { id: 'u2', role: 'user', content: 'hello?' }] }),
            409,
            'run_active',
          ],
        ]
        for (const [name, body, status, code] of cases) {
          const answer = await post(conversationId, body)
          expect([name, answer.status, answer.body.code], JSON.stringify(answer.body)).toEqual([name, status, code])
        }
        // Nothing was answered: both decisions still wait.
        expect(
          (
            await server.request('GET', `/api/decisions?status=pending&conversationId=${conversationId}`, {
              token: alice.token,
            })
          ).body.items,
        ).toHaveLength(2)
      })
    })
  })
}
