import { DefaultChatTransport, readUIMessageStream, type UIMessage } from 'ai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// The AI SDK's UI message stream (useChat) over a conversation, read by the real `ai`
// package's transport and reader (docs/ui-stream.md).

type ToolPart = {
  type: string
  toolCallId: string
  toolName: string
  state: string
  input?: unknown
  output?: unknown
  approval?: { id: string; approved?: boolean }
}

for (const engine of apiEngines()) {
  describe(`UI message stream on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let model: ScriptedModel
    let alice: TestUser
    let projectId: string

    beforeAll(async () => {
      store = await openTestStore(engine)
      model = new ScriptedModel({ id: 'scripted', turns: [] })
      server = await startTestServer(store, { models: [model], plugins: ['rdm'] })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'ui' } })).body.id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const conversation = async (): Promise<string> =>
      (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body
        .id
    const transportFor = (
      conversationId: string,
      body: Record<string, unknown> = {},
    ): DefaultChatTransport<UIMessage> =>
      new DefaultChatTransport({
        api: `${server.url}/api/conversations/${conversationId}/ui-stream`,
        headers: { authorization: `Bearer ${alice.token}` },
        body,
      })
    const userMessage = (text: string): UIMessage => ({
      id: `u-${Math.random().toString(36).slice(2)}`,
      role: 'user',
      parts: [{ type: 'text', text }],
    })

    /** Sends like useChat and reads the stream like it: the assistant message as it ends up. */
    async function send(
      conversationId: string,
      messages: UIMessage[],
      options: { continuing?: UIMessage; body?: Record<string, unknown> } = {},
    ): Promise<UIMessage> {
      const stream = await transportFor(conversationId, options.body).sendMessages({
        chatId: conversationId,
        messages,
        trigger: 'submit-message',
        messageId: undefined,
        abortSignal: undefined,
      })
      let last: UIMessage | undefined
      for await (const message of readUIMessageStream({
        stream,
        ...(options.continuing && { message: options.continuing }),
        terminateOnError: true,
      }))
        last = message
      if (!last) throw new Error('no message')
      return last
    }
    const text = (message: UIMessage): string =>
      message.parts
        .filter((part) => part.type === 'text')
        .map((part) => (part as { text: string }).text)
        .join('')
    const tools = (message: UIMessage): ToolPart[] =>
      message.parts.filter((part) => part.type === 'dynamic-tool') as unknown as ToolPart[]

    it('streams an answer as one assistant message whose id is the run id', async () => {
      model.setTurns([{ text: 'Hello from Plinth, streamed word by word.' }])
      const conversationId = await conversation()
      const raw = await fetch(`${server.url}/api/conversations/${conversationId}/ui-stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${alice.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ id: conversationId, messages: [userMessage('hi')], trigger: 'submit-message' }),
      })
      expect(raw.status).toBe(200)
      expect(raw.headers.get('x-vercel-ai-ui-message-stream')).toBe('v1')
      expect(raw.headers.get('content-type')).toContain('text/event-stream')
      const body = await raw.text()
      expect(body.trim().endsWith('data: [DONE]')).toBe(true)
      const types = body
        .split('\n\n')
        .filter((frame) => frame.startsWith('data: {'))
        .map((frame) => (JSON.parse(frame.slice(6)) as { type: string }).type)
      expect(types[0]).toBe('start')
      expect(types).toEqual(
        expect.arrayContaining(['start-step', 'text-start', 'text-delta', 'text-end', 'finish-step', 'finish']),
      )

      model.setTurns([{ text: 'Second answer.' }])
      const message = await send(conversationId, [userMessage('again')])
      expect(message.role).toBe('assistant')
      expect(text(message)).toBe('Second answer.')
      const run = await server.request('GET', `/api/runs/${message.id}`, { token: alice.token })
      expect(run.body).toMatchObject({ id: message.id, conversationId, status: 'completed' })
    })

    it('shows a tool call Plinth runs, with its input and output, then the answer', async () => {
      model.setTurns([{ toolCalls: [{ name: 'rdm__ping', arguments: { target: 'db-1' } }] }, { text: 'db-1 answers.' }])
      const conversationId = await conversation()
      const message = await send(conversationId, [userMessage('ping db-1')])
      const [ping] = tools(message)
      expect(ping).toMatchObject({
        toolName: 'rdm__ping',
        state: 'output-available',
        input: { target: 'db-1' },
        output: { pong: true, target: 'db-1' },
      })
      expect(text(message)).toBe('db-1 answers.')
    })

    it("a run budget passes through useChat's body: the run that would pass it fails budget_exceeded", async () => {
      model.setTurns([
        { toolCalls: [{ name: 'rdm__ping', arguments: { target: 'a' } }] },
        { toolCalls: [{ name: 'rdm__ping', arguments: { target: 'b' } }] },
        { text: 'Done.' },
      ])
      const conversationId = await conversation()
      const raw = await fetch(`${server.url}/api/conversations/${conversationId}/ui-stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${alice.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          id: conversationId,
          messages: [userMessage('ping twice')],
          trigger: 'submit-message',
          budget: { maxModelCalls: 1 },
        }),
      })
      expect(raw.status).toBe(200)
      const frames = (await raw.text())
        .split('\n\n')
        .filter((frame) => frame.startsWith('data: {'))
        .map((frame) => JSON.parse(frame.slice(6)) as { type: string; messageId?: string; errorText?: string })
      const runId = frames.find((frame) => frame.type === 'start')!.messageId!
      expect(frames.find((frame) => frame.type === 'error')?.errorText).toContain('budget')
      const run = await server.request('GET', `/api/runs/${runId}`, { token: alice.token })
      expect(run.body).toMatchObject({
        status: 'failed',
        budget: { maxModelCalls: 1 },
        error: { code: 'budget_exceeded' },
        usage: { modelCalls: 1 },
      })
    })

    it('a call that waits for a person is an approval request; the approval answers the decision and the same message continues', async () => {
      model.setTurns([
        {
          text: 'Writing it down.',
          toolCalls: [
            { name: 'rdm__draft__compose', arguments: { title: 'From useChat', body: 'approved in the page' } },
          ],
        },
        { text: 'Done: the draft is written.' },
      ])
      const conversationId = await conversation()
      const first = userMessage('write it up')
      const asked = await send(conversationId, [first])
      const [compose] = tools(asked)
      expect(compose).toMatchObject({
        toolName: 'rdm__draft__compose',
        state: 'approval-requested',
        approval: { id: expect.any(String) },
      })
      const decision = await server.request('GET', `/api/decisions/${compose!.approval!.id}`, { token: alice.token })
      expect(decision.body).toMatchObject({ status: 'pending', runId: asked.id, commandId: 'rdm.draft.compose' })
      // What addToolApprovalResponse does to the part, then the request sendAutomaticallyWhen sends.
      const answered: UIMessage = {
        ...asked,
        parts: asked.parts.map((part) =>
          part.type === 'dynamic-tool'
            ? ({
                ...part,
                state: 'approval-responded',
                approval: { id: compose!.approval!.id, approved: true },
              } as unknown as typeof part)
            : part,
        ),
      }
      const continued = await send(conversationId, [first, answered], { continuing: answered })
      expect(continued.id).toBe(asked.id)
      expect(tools(continued)[0]).toMatchObject({
        state: 'output-available',
        output: { title: 'From useChat', status: 'draft' },
      })
      expect(text(continued)).toBe('Writing it down.Done: the draft is written.')
      expect(
        (await server.request('GET', `/api/decisions/${compose!.approval!.id}`, { token: alice.token })).body.status,
      ).toBe('approved')
    })

    it('two approvals answered one request at a time: each tool’s output reaches the message', async () => {
      model.setTurns([
        {
          toolCalls: [
            { name: 'rdm__draft__compose', arguments: { title: 'First', body: 'a' } },
            { name: 'rdm__draft__compose', arguments: { title: 'Second', body: 'b' } },
          ],
        },
        { text: 'Both written.' },
      ])
      const conversationId = await conversation()
      const first = userMessage('write two')
      const asked = await send(conversationId, [first])
      const [a, b] = tools(asked)
      expect([a!.state, b!.state]).toEqual(['approval-requested', 'approval-requested'])
      const respond = (message: UIMessage, ids: string[]): UIMessage => ({
        ...message,
        parts: message.parts.map((part) => {
          const tool = part as unknown as ToolPart
          return part.type === 'dynamic-tool' && ids.includes(tool.toolCallId) && tool.state === 'approval-requested'
            ? ({ ...part, state: 'approval-responded', approval: { ...tool.approval, approved: true } } as typeof part)
            : part
        }),
      })
      // A first, alone: the run still waits for B.
      const onlyA = respond(asked, [a!.toolCallId])
      const waiting = await send(conversationId, [first, onlyA], { continuing: onlyA })
      // Then B too: the message ends with both outputs.
      const both = respond(waiting, [a!.toolCallId, b!.toolCallId])
      const continued = await send(conversationId, [first, both], { continuing: both })
      expect(tools(continued).map((part) => [part.toolCallId, part.state])).toEqual([
        [a!.toolCallId, 'output-available'],
        [b!.toolCallId, 'output-available'],
      ])
      expect(text(continued)).toBe('Both written.')
    })

    it('two approvals and a client tool answered in one request: the message goes on to the answer', async () => {
      model.setTurns([
        {
          toolCalls: [
            { name: 'rdm__draft__compose', arguments: { title: 'First', body: 'a' } },
            { name: 'rdm__draft__compose', arguments: { title: 'Second', body: 'b' } },
            { name: 'pick_color', arguments: { from: ['red', 'blue'] } },
          ],
        },
        { text: 'All three done.' },
      ])
      const body = {
        clientTools: [{ name: 'pick_color', description: 'Ask the user for a color', parameters: { type: 'object' } }],
      }
      const conversationId = await conversation()
      const first = userMessage('write two and ask me')
      const asked = await send(conversationId, [first], { body })
      const [a, b, pick] = tools(asked)
      expect([a!.state, b!.state, pick!.state]).toEqual(['approval-requested', 'approval-requested', 'input-available'])
      // What the client holds once the person approved both and the client tool ran, sent at once.
      const all: UIMessage = {
        ...asked,
        parts: asked.parts.map((part) => {
          const tool = part as unknown as ToolPart
          if (part.type !== 'dynamic-tool') return part
          return (tool.state === 'approval-requested'
            ? { ...part, state: 'approval-responded', approval: { ...tool.approval, approved: true } }
            : { ...part, state: 'output-available', output: { color: 'blue' } }) as unknown as typeof part
        }),
      }
      const continued = await send(conversationId, [first, all], { continuing: all, body })
      expect(tools(continued).map((part) => [part.toolCallId, part.state])).toEqual([
        [a!.toolCallId, 'output-available'],
        [b!.toolCallId, 'output-available'],
        [pick!.toolCallId, 'output-available'],
      ])
      expect(text(continued)).toBe('All three done.')
    })

    it('a denied approval rejects the call: the part is output-denied and the run goes on', async () => {
      model.setTurns([
        { toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'Never', body: 'x' } }] },
        { text: 'Not written, as you asked.' },
      ])
      const conversationId = await conversation()
      const first = userMessage('write')
      const asked = await send(conversationId, [first])
      const approvalId = tools(asked)[0]!.approval!.id
      const answered: UIMessage = {
        ...asked,
        parts: asked.parts.map((part) =>
          part.type === 'dynamic-tool'
            ? ({
                ...part,
                state: 'approval-responded',
                approval: { id: approvalId, approved: false, reason: 'not now' },
              } as unknown as typeof part)
            : part,
        ),
      }
      const continued = await send(conversationId, [first, answered], { continuing: answered })
      expect(tools(continued)[0]!.state).toBe('output-denied')
      expect(text(continued)).toBe('Not written, as you asked.')
    })

    it('a client tool is the client’s to run (not providerExecuted); its output continues the run', async () => {
      model.setTurns([
        { toolCalls: [{ name: 'pick_color', arguments: { from: ['red', 'blue'] } }] },
        { text: 'You picked blue.' },
      ])
      const conversationId = await conversation()
      const first = userMessage('pick a color')
      const body = {
        clientTools: [
          {
            name: 'pick_color',
            description: 'Ask the user for a color',
            parameters: { type: 'object', properties: { from: { type: 'array', items: { type: 'string' } } } },
          },
        ],
      }
      const asked = await send(conversationId, [first], { body })
      const [pick] = tools(asked)
      expect(pick).toMatchObject({ toolName: 'pick_color', state: 'input-available', input: { from: ['red', 'blue'] } })
      expect(
        (asked.parts.find((part) => part.type === 'dynamic-tool') as { providerExecuted?: boolean }).providerExecuted,
      ).toBe(false)
      // What addToolOutput does, then the automatic send.
      const answered: UIMessage = {
        ...asked,
        parts: asked.parts.map((part) =>
          part.type === 'dynamic-tool'
            ? ({ ...part, state: 'output-available', output: { color: 'blue' } } as unknown as typeof part)
            : part,
        ),
      }
      const continued = await send(conversationId, [first, answered], { continuing: answered })
      expect(text(continued)).toBe('You picked blue.')
      expect(model.calls.at(-1)!.messages.some((message) => JSON.stringify(message).includes('blue'))).toBe(true)
      // The part stays as the client set it: its own output, run by the client.
      expect(
        continued.parts.find((part) => part.type === 'dynamic-tool') as unknown as {
          state: string
          output: unknown
          providerExecuted?: boolean
        },
      ).toMatchObject({ state: 'output-available', output: { color: 'blue' }, providerExecuted: false })
    })

    it('a client tool that failed on the client stays output-error after the run goes on', async () => {
      model.setTurns([
        { toolCalls: [{ name: 'get_location', arguments: {} }] },
        { text: 'I could not get your location.' },
      ])
      const conversationId = await conversation()
      const first = userMessage('where am I')
      const body = {
        clientTools: [{ name: 'get_location', description: 'The user’s location', parameters: { type: 'object' } }],
      }
      const asked = await send(conversationId, [first], { body })
      const answered: UIMessage = {
        ...asked,
        parts: asked.parts.map((part) =>
          part.type === 'dynamic-tool'
            ? ({ ...part, state: 'output-error', errorText: 'GPS off' } as unknown as typeof part)
            : part,
        ),
      }
      const continued = await send(conversationId, [first, answered], { continuing: answered, body })
      expect(text(continued)).toBe('I could not get your location.')
      expect(
        continued.parts.find((part) => part.type === 'dynamic-tool') as unknown as {
          state: string
          errorText?: string
          providerExecuted?: boolean
        },
      ).toMatchObject({ state: 'output-error', errorText: 'GPS off', providerExecuted: false })
      // Stored as the failure it was, as AG-UI's tool error is: the model read {accepted: false, error}.
      const messages = (
        await server.request('GET', `/api/conversations/${conversationId}/messages`, { token: alice.token })
      ).body.items
      expect(messages.find((message: { role: string }) => message.role === 'tool')).toMatchObject({
        toolStatus: 'error',
        toolOutput: { accepted: false, error: 'GPS off' },
      })
    })

    it('GET resumes the active run’s whole message from its start, then live; 204 when nothing is active', async () => {
      model.setTurns([{ text: 'one two three four five six seven eight nine ten', delayMs: 150 }])
      const conversationId = await conversation()
      const transport = transportFor(conversationId)
      // The first request goes away early, as a reload would; the run goes on.
      const controller = new AbortController()
      const stream = await transport.sendMessages({
        chatId: conversationId,
        messages: [userMessage('count')],
        trigger: 'submit-message',
        messageId: undefined,
        abortSignal: controller.signal,
      })
      const reader = stream.getReader()
      for (;;) {
        const { value } = await reader.read()
        if (value?.type === 'text-delta') break
      }
      controller.abort()
      const resumed = await new DefaultChatTransport({
        api: `${server.url}/api/conversations/${conversationId}/ui-stream`,
        headers: { authorization: `Bearer ${alice.token}` },
        prepareReconnectToStreamRequest: ({ id }) => ({ api: `${server.url}/api/conversations/${id}/ui-stream` }),
      }).reconnectToStream({ chatId: conversationId })
      expect(resumed).not.toBeNull()
      let last: UIMessage | undefined
      for await (const message of readUIMessageStream({ stream: resumed!, terminateOnError: true })) last = message
      expect(text(last!)).toBe('one two three four five six seven eight nine ten')
      const idle = await fetch(`${server.url}/api/conversations/${conversationId}/ui-stream`, {
        headers: { authorization: `Bearer ${alice.token}` },
      })
      expect(idle.status).toBe(204)
    })

    it('refuses what it cannot act on with problem+json and a stable code', async () => {
      const conversationId = await conversation()
      const post = (body: unknown) =>
        server.request('POST', `/api/conversations/${conversationId}/ui-stream`, { token: alice.token, body })
      const role = await post({ messages: [{ id: 'm', role: 'robot', parts: [{ type: 'text', text: 'x' }] }] })
      expect(role.status).toBe(400)
      expect(role.body).toMatchObject({
        code: 'invalid_ui_message',
        detail: expect.stringContaining('messages[0].role'),
      })
      const part = await post({ messages: [{ id: 'm', role: 'user', parts: [{ type: 'hologram' }] }] })
      expect(part.body).toMatchObject({
        code: 'invalid_ui_message',
        detail: expect.stringContaining('messages[0].parts[0].type'),
      })
      const notText = await post({ messages: [{ id: 'm', role: 'user', parts: [{ type: 'text', text: 5 }] }] })
      expect(notText.body).toMatchObject({
        code: 'invalid_ui_message',
        detail: 'messages[0].parts[0].text: must be a string',
      })
      const file = await post({
        messages: [{ id: 'm', role: 'user', parts: [{ type: 'file', mediaType: 'image/png', url: 'data:,' }] }],
      })
      expect(file.body.code).toBe('unsupported_ui_part')
      expect((await post({ id: 'another-chat', messages: [userMessage('x')] })).body.code).toBe('chat_id_mismatch')
      expect((await post({ messages: [] })).status).toBe(400)
      expect((await post({ messages: [{ id: 'nope', role: 'assistant', parts: [] }] })).status).toBe(404)
      const strangers = await server.createUser()
      const hidden = await server.request('POST', `/api/conversations/${conversationId}/ui-stream`, {
        token: strangers.token,
        body: { messages: [userMessage('x')] },
      })
      expect(hidden.status).toBe(404)
    })
  })
}
