import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { ElicitRequestSchema, type ElicitRequest, type ElicitResult } from '@modelcontextprotocol/sdk/types.js'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

const classified = new URL('./__fixtures__/plugins/classified.ts', import.meta.url).pathname

// A call through /mcp that needs a person is asked of the MCP client through
// elicitation when its session says it can answer one (docs/mcp.md, "Sessions and elicitation").

type Answer = (request: ElicitRequest) => Promise<ElicitResult> | ElicitResult

/** An SDK client that answers elicitations with `answer` (set per test). */
async function connectAsking(
  url: string,
  token: string,
  path: string,
  answer: { current: Answer },
): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const transport = new StreamableHTTPClientTransport(new URL(path, url), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  })
  const client = new Client({ name: 'asking-client', version: '1.0.0' }, { capabilities: { elicitation: {} } })
  client.setRequestHandler(ElicitRequestSchema, (request) => answer.current(request))
  await client.connect(transport)
  return { client, transport }
}

async function rpc(
  url: string,
  token: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; text: string }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: {
      accept: 'application/json, text/event-stream',
      'content-type': 'application/json',
      authorization: `Bearer ${token}`,
      'mcp-protocol-version': '2025-06-18',
      ...headers,
    },
    body: JSON.stringify(body),
  })
  return { status: response.status, text: await response.text() }
}

for (const engine of apiEngines()) {
  describe(`MCP sessions and elicitation on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let bob: TestUser
    let projectId: string
    let conversationId: string
    const answer: { current: Answer } = { current: () => ({ action: 'cancel' }) }
    const asked: ElicitRequest[] = []
    let client: Client
    let transport: StreamableHTTPClientTransport

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { plugins: ['rdm', classified] })
      alice = await server.createUser()
      bob = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'asked' } })).body
        .id
      conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
      ;({ client, transport } = await connectAsking(server.url, alice.token, `/mcp/projects/${projectId}`, {
        get current() {
          return (request: ElicitRequest) => {
            asked.push(request)
            return answer.current(request)
          }
        },
      }))
    })
    afterAll(async () => {
      await client?.close().catch(() => undefined)
      await server?.close()
      await store?.close()
    })

    const titles = async (): Promise<string[]> =>
      (await server.request('GET', `/api/projects/${projectId}/knowledge`, { token: alice.token })).body.items.map(
        (item: { title: string }) => item.title,
      )

    it('asks the client, and an approval runs the call: its result comes back in the same tools/call', async () => {
      answer.current = () => ({ action: 'accept', content: { decision: 'approve' } })
      const before = asked.length
      const result = await client.callTool({
        name: 'rdm__draft__compose',
        arguments: { title: 'Approved', body: 'through elicitation' },
      })
      expect(result.isError ?? false).toBe(false)
      expect(result.structuredContent).toMatchObject({ title: 'Approved', status: 'draft', projectId })
      const question = asked[before]!
      expect(question.params.message).toContain('rdm.draft.compose')
      expect(question.params.message).toContain('high risk')
      // No conversation in the URL: a session allowance could not apply, so it is not offered.
      expect((question.params as { requestedSchema: unknown }).requestedSchema).toMatchObject({
        type: 'object',
        required: ['decision'],
        properties: { decision: { type: 'string', enum: ['approve', 'reject'] } },
      })
      expect(await titles()).toContain('Approved')
      const dispatchId = (result._meta as Record<string, string>)['plinth/dispatchId']
      const audit = await server.request('GET', '/api/audit?commandId=rdm.draft.compose&entrance=mcp', {
        token: alice.token,
      })
      expect(audit.body.items.find((item: { id: string }) => item.id === dispatchId)).toMatchObject({
        status: 'succeeded',
        risk: 'high',
        decision: { outcome: 'approved', by: alice.user.id, via: 'human' },
      })
    })

    it('a decline rejects the call: nothing runs, the client reads the rejection', async () => {
      answer.current = () => ({ action: 'decline' })
      const result = await client.callTool({
        name: 'rdm__draft__compose',
        arguments: { title: 'Declined', body: 'no' },
      })
      expect(result.isError).toBe(true)
      expect(result.structuredContent).toMatchObject({ error: { code: 'rejected' } })
      expect(await titles()).not.toContain('Declined')
    })

    it('a cancel leaves the decision open: the call answers awaiting_decision, and the user can still approve it', async () => {
      answer.current = () => ({ action: 'cancel' })
      const result = await client.callTool({
        name: 'rdm__draft__compose',
        arguments: { title: 'Later', body: 'maybe' },
      })
      expect(result.isError).toBe(true)
      const pending = result.structuredContent as { status: string; decisionId: string }
      expect(pending.status).toBe('awaiting_decision')
      expect(
        (await server.request('GET', `/api/decisions/${pending.decisionId}`, { token: alice.token })).body.status,
      ).toBe('pending')
      const decided = await server.request('POST', `/api/decisions/${pending.decisionId}`, {
        token: alice.token,
        body: { decision: 'approve' },
      })
      expect(decided.body.dispatch).toMatchObject({ status: 'succeeded', result: { title: 'Later' } })
    })

    it('an answer given elsewhere (the console) while the client is being asked ends the call with its result', async () => {
      let release!: (result: ElicitResult) => void
      let seen!: (request: ElicitRequest) => void
      const question = new Promise<ElicitRequest>((resolve) => (seen = resolve))
      answer.current = (request) => {
        seen(request)
        return new Promise<ElicitResult>((resolve) => (release = resolve))
      }
      const calling = client.callTool({
        name: 'rdm__draft__compose',
        arguments: { title: 'Console', body: 'answered there' },
      })
      await question
      const pending = await server.request('GET', '/api/decisions?status=pending', { token: alice.token })
      const decision = pending.body.items.find(
        (item: { commandId: string; params: { title?: string } }) => item.params.title === 'Console',
      )
      expect(decision).toBeTruthy()
      expect(
        (
          await server.request('POST', `/api/decisions/${decision.id}`, {
            token: alice.token,
            body: { decision: 'approve' },
          })
        ).status,
      ).toBe(200)
      const result = await calling
      expect(result.structuredContent).toMatchObject({ title: 'Console' })
      release({ action: 'cancel' })
    })

    it('in a conversation, approve_session is offered and lets the conversation run the command again unasked', async () => {
      const inConversation = await connectAsking(
        server.url,
        alice.token,
        `/mcp/projects/${projectId}/conversations/${conversationId}`,
        {
          get current() {
            return (request: ElicitRequest) => {
              asked.push(request)
              return { action: 'accept' as const, content: { decision: 'approve_session' } }
            }
          },
        },
      )
      try {
        const before = asked.length
        const first = await inConversation.client.callTool({
          name: 'classified__touch',
          arguments: { path: '/etc/motd' },
        })
        expect(first.structuredContent).toMatchObject({ touched: '/etc/motd' })
        const params = asked[before]!.params as { requestedSchema: unknown }
        expect(params.requestedSchema).toMatchObject({
          properties: { decision: { enum: ['approve', 'approve_session', 'reject'] } },
        })
        const second = await inConversation.client.callTool({
          name: 'classified__touch',
          arguments: { path: '/etc/motd' },
        })
        expect(second.structuredContent).toMatchObject({ touched: '/etc/motd' })
        expect(asked.length).toBe(before + 1)
        // A command that always asks is not offered approve_session, even in a conversation.
        await inConversation.client.callTool({
          name: 'rdm__draft__compose',
          arguments: { title: 'Session', body: 'one' },
        })
        expect((asked[before + 1]!.params as { requestedSchema: unknown }).requestedSchema).toMatchObject({
          properties: { decision: { enum: ['approve', 'reject'] } },
        })
        const offered = (
          asked[before + 1]!.params as unknown as {
            requestedSchema: { properties: { decision: { description: string } } }
          }
        ).requestedSchema.properties.decision.description
        expect(offered).not.toContain('approve_session')
      } finally {
        await inConversation.client.close()
      }
    })

    it('sessions belong to their user and end on DELETE; an unknown session is 404, as the protocol asks', async () => {
      const url = `${server.url}/mcp/projects/${projectId}`
      const sessionId = transport.sessionId!
      const list = { jsonrpc: '2.0', id: 1, method: 'tools/list' }
      expect((await rpc(url, alice.token, list, { 'mcp-session-id': sessionId })).status).toBe(200)
      const unknown = await rpc(url, alice.token, list, { 'mcp-session-id': '00000000-0000-4000-8000-000000000000' })
      expect(unknown.status).toBe(404)
      expect(JSON.parse(unknown.text)).toMatchObject({
        jsonrpc: '2.0',
        error: { code: -32001, message: 'Session not found' },
      })
      // Bob cannot use (or end) Alice's session, even knowing its id.
      expect((await rpc(`${server.url}/mcp`, bob.token, list, { 'mcp-session-id': sessionId })).status).toBe(404)
      const bobDelete = await fetch(`${server.url}/mcp`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${bob.token}`, 'mcp-session-id': sessionId },
      })
      expect(bobDelete.status).toBe(404)
      // An answer to an elicitation without its session is refused; one from another session is ignored.
      const stray = await rpc(url, alice.token, {
        jsonrpc: '2.0',
        id: 'plinth-decision:01JZZZZZZZZZZZZZZZZZZZZZZZ',
        result: { action: 'accept', content: { decision: 'approve' } },
      })
      expect(stray.status).toBe(400)

      // Another session's question, still open: an answer from this session does not decide it.
      let release!: (result: ElicitResult) => void
      let questioned!: (request: ElicitRequest) => void
      const question = new Promise<ElicitRequest>((resolve) => (questioned = resolve))
      const other = await connectAsking(server.url, alice.token, `/mcp/projects/${projectId}`, {
        current: (request) => {
          questioned(request)
          return new Promise<ElicitResult>((resolve) => (release = resolve))
        },
      })
      const calling = other.client.callTool({ name: 'rdm__draft__compose', arguments: { title: 'Forged', body: 'x' } })
      await question
      const decisionId = (
        (await server.request('GET', '/api/decisions?status=pending', { token: alice.token })).body.items as Array<{
          id: string
          params: { title?: string }
        }>
      ).find((item) => item.params.title === 'Forged')!.id
      const forged = await rpc(
        url,
        alice.token,
        {
          jsonrpc: '2.0',
          id: `plinth-decision:${decisionId}`,
          result: { action: 'accept', content: { decision: 'approve' } },
        },
        { 'mcp-session-id': sessionId },
      )
      expect(forged.status).toBe(202)
      expect((await server.request('GET', `/api/decisions/${decisionId}`, { token: alice.token })).body.status).toBe(
        'pending',
      )
      // The session asked still answers it.
      release({ action: 'decline' })
      expect((await calling).structuredContent).toMatchObject({ error: { code: 'rejected' } })
      // An initialize naming a forgotten session starts a new one instead of failing.
      const reinit = await rpc(
        url,
        alice.token,
        {
          jsonrpc: '2.0',
          id: 1,
          method: 'initialize',
          params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } },
        },
        { 'mcp-session-id': '00000000-0000-4000-8000-000000000000' },
      )
      expect(reinit.status).toBe(200)
      const otherId = other.transport.sessionId!
      await other.transport.terminateSession()
      expect((await rpc(url, alice.token, list, { 'mcp-session-id': otherId })).status).toBe(404)
      await other.client.close()
    })
  })
}
