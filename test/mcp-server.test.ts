import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import {
  discoverOAuthProtectedResourceMetadata,
  extractWWWAuthenticateParams,
} from '@modelcontextprotocol/sdk/client/auth.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { OAuthProtectedResourceMetadataSchema } from '@modelcontextprotocol/sdk/shared/auth.js'
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { readOnlyShares } from './__fixtures__/plugins/read-only-share.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitFor } from './helpers/waits.js'

// Plinth as an MCP server (docs/mcp.md#sessions-and-elicitation-plinth-as-an-mcp-server).
// The official SDK client talks to /mcp with a user's token; every call goes through the bus (entrance
// `mcp`) with the same gate, decisions and audit.

/** An SDK client connected to `path` of the server with `token`. */
async function connectClient(
  url: string,
  token: string,
  path = '/mcp',
): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const transport = new StreamableHTTPClientTransport(new URL(path, url), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  })
  const client = new Client({ name: 'plinth-test', version: '1.0.0' })
  await client.connect(transport)
  return { client, transport }
}

/** A raw JSON-RPC POST to the MCP endpoint (as a client that gets things wrong would send it). */
async function post(
  url: string,
  token: string | undefined,
  body: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; text: string }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: {
      accept: 'application/json, text/event-stream',
      'content-type': 'application/json',
      ...(token && { authorization: `Bearer ${token}` }),
      ...headers,
    },
    body,
  })
  return { status: response.status, headers: response.headers, text: await response.text() }
}

for (const engine of apiEngines()) {
  describe(`MCP server on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let bob: TestUser
    let projectId: string
    let conversationId: string
    const clients: Client[] = []

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { plugins: ['rdm'] })
      alice = await server.createUser()
      bob = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'ops' } })).body.id
      conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
    })
    afterAll(async () => {
      for (const client of clients) await client.close().catch(() => undefined)
      await server?.close()
      await store?.close()
    })

    const connect = async (
      token: string,
      path = '/mcp',
    ): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> => {
      const connected = await connectClient(server.url, token, path)
      clients.push(connected.client)
      return connected
    }

    it('lists the caller’s tools in tool-name order with schemas and risk hints, in a session', async () => {
      const { client, transport } = await connect(alice.token)
      expect(transport.sessionId).toMatch(/^[0-9a-f-]{36}$/)
      expect(client.getServerVersion()).toMatchObject({ name: 'plinth' })
      expect(client.getServerCapabilities()?.tools).toBeTruthy()
      const { tools } = await client.listTools()
      const names = tools.map((tool) => tool.name)
      expect(names).toEqual([...names].sort())
      expect(names).toEqual(
        expect.arrayContaining([
          'rdm__ping',
          'rdm__trace',
          'rdm__baseline',
          'rdm__draft__compose',
          'list_projects',
          'knowledge_search',
        ]),
      )
      // Not exposed as tools, or not for this entrance.
      expect(names).not.toContain('rdm__member__add')
      expect(names.some((name) => name.includes('set_permission_mode'))).toBe(false)
      const ping = tools.find((tool) => tool.name === 'rdm__ping')!
      expect(ping).toMatchObject({
        title: 'Ping',
        description: expect.stringContaining('pong'),
        inputSchema: { type: 'object', properties: { target: { type: 'string' } } },
        annotations: { readOnlyHint: true, destructiveHint: false },
        _meta: { 'plinth/commandId': 'rdm.ping', 'plinth/risk': 'low' },
      })
      expect(tools.find((tool) => tool.name === 'rdm__draft__compose')!.annotations).toMatchObject({
        readOnlyHint: false,
        destructiveHint: true,
      })
      expect(tools.find((tool) => tool.name === 'rdm__trace')!.annotations).toMatchObject({
        readOnlyHint: true,
        idempotentHint: true,
      })
      // The same list again: deterministic.
      expect((await client.listTools()).tools.map((tool) => tool.name)).toEqual(names)
    })

    it('calls a tool through the bus: the result as text and structured content, audited with entrance mcp', async () => {
      const { client } = await connect(alice.token)
      const result = await client.callTool({ name: 'rdm__ping', arguments: { target: 'db-1' } })
      expect(result.isError ?? false).toBe(false)
      expect(result.structuredContent).toMatchObject({ pong: true, target: 'db-1' })
      const content = result.content as Array<{ type: string; text: string }>
      expect(content[0]!.type).toBe('text')
      expect(JSON.parse(content[0]!.text)).toMatchObject({ pong: true, target: 'db-1' })
      const dispatchId = (result._meta as Record<string, string>)['plinth/dispatchId']
      expect(dispatchId).toMatch(/^[0-9A-Z]{26}$/)
      const audit = await server.request('GET', '/api/audit?commandId=rdm.ping&entrance=mcp', { token: alice.token })
      expect(audit.status).toBe(200)
      const envelope = audit.body.items.find((item: { id: string }) => item.id === dispatchId)
      expect(envelope).toMatchObject({
        commandId: 'rdm.ping',
        entrance: 'mcp',
        actor: { type: 'user', id: alice.user.id, onBehalfOf: alice.user.id },
        projectId: null,
        params: { target: 'db-1' },
        risk: 'low',
        status: 'succeeded',
        decision: { outcome: 'approved', via: 'risk' },
      })
      // Bob sees nothing of Alice's calls.
      const bobs = await server.request('GET', '/api/audit?entrance=mcp', { token: bob.token })
      expect(bobs.body.items.find((item: { id: string }) => item.id === dispatchId)).toBeUndefined()
    })

    it('answers an unknown tool with a JSON-RPC InvalidParams error, and invalid arguments with an error result', async () => {
      const { client } = await connect(alice.token)
      const unknown = await client.callTool({ name: 'no__such_tool', arguments: {} }).catch((error: unknown) => error)
      expect(unknown).toBeInstanceOf(McpError)
      expect((unknown as McpError).code).toBe(ErrorCode.InvalidParams)
      const invalid = await client.callTool({ name: 'rdm__ping', arguments: { target: 42, extra: true } })
      expect(invalid.isError).toBe(true)
      expect(invalid.structuredContent).toMatchObject({ error: { code: 'validation_failed' } })
      expect((invalid.content as Array<{ text: string }>)[0]!.text).toMatch(/^validation_failed: /)
    })

    it('refuses a missing or revoked token with 401 and a challenge naming the resource metadata', async () => {
      const expected = `resource_metadata="${server.url}/.well-known/oauth-protected-resource/mcp"`
      const initialize = JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
      })
      const none = await post(`${server.url}/mcp`, undefined, initialize)
      expect(none.status).toBe(401)
      expect(none.headers.get('content-type')).toMatch(/^application\/problem\+json/)
      expect(JSON.parse(none.text)).toMatchObject({ code: 'unauthorized' })
      expect(none.headers.get('www-authenticate')).toBe(`Bearer ${expected}`)
      const carol = await server.createUser()
      const { client } = await connect(carol.token)
      expect((await client.callTool({ name: 'rdm__ping', arguments: {} })).isError ?? false).toBe(false)
      await server.revoke(carol)
      const revoked = await post(`${server.url}/mcp/projects/${projectId}`, carol.token, initialize)
      expect(revoked.status).toBe(401)
      const challenge = revoked.headers.get('www-authenticate')!
      expect(challenge).toContain(expected)
      expect(challenge).toContain('error="invalid_token"')
      // As the SDK's own client reads it.
      expect(
        extractWWWAuthenticateParams(new Response(null, { status: 401, headers: { 'www-authenticate': challenge } }))
          .resourceMetadataUrl?.href,
      ).toBe(`${server.url}/.well-known/oauth-protected-resource/mcp`)
      // The already connected client is refused at its next request too.
      await expect(client.listTools()).rejects.toThrow(/401/)
      // /api's answer keeps its plain challenge.
      expect((await server.request('GET', '/api/me')).headers.get('www-authenticate')).toBe('Bearer')
    })

    it('serves the protected resource metadata (RFC 9728) at both well-known paths', async () => {
      const discovered = await discoverOAuthProtectedResourceMetadata(new URL('/mcp', server.url))
      expect(discovered).toEqual({
        resource: `${server.url}/mcp`,
        authorization_servers: [],
        bearer_methods_supported: ['header'],
        resource_name: 'Plinth MCP server',
      })
      const root = await server.request('GET', '/.well-known/oauth-protected-resource')
      expect(root.status).toBe(200)
      expect(OAuthProtectedResourceMetadataSchema.parse(root.body)).toMatchObject({
        resource: server.url,
        authorization_servers: [],
        bearer_methods_supported: ['header'],
      })
    })

    it('scopes to a project the caller may read: 404 for another’s, the profile’s tool subset, calls in the project', async () => {
      const forBob = await post(
        `${server.url}/mcp/projects/${projectId}`,
        bob.token,
        JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      )
      expect(forBob.status).toBe(404)
      expect(JSON.parse(forBob.text)).toMatchObject({ code: 'not_found', detail: 'project not found' })
      const missing = await post(
        `${server.url}/mcp/projects/01JZZZZZZZZZZZZZZZZZZZZZZZ`,
        alice.token,
        JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      )
      expect(missing.status).toBe(404)
      await expect(connectClient(server.url, bob.token, `/mcp/projects/${projectId}`)).rejects.toThrow(/404/)

      const subset = await server.request('POST', '/api/projects', {
        token: alice.token,
        body: { name: 'subset', tools: ['rdm.ping', 'rdm__trace'] },
      })
      expect(subset.status).toBe(201)
      const { client } = await connect(alice.token, `/mcp/projects/${subset.body.id}`)
      expect((await client.listTools()).tools.map((tool) => tool.name)).toEqual(['rdm__ping', 'rdm__trace'])
      const outside = await client.callTool({ name: 'rdm__baseline', arguments: {} }).catch((error: unknown) => error)
      expect((outside as McpError).code).toBe(ErrorCode.InvalidParams)
      const pinged = await client.callTool({ name: 'rdm__ping', arguments: { target: 'in-project' } })
      const audit = await server.request('GET', `/api/audit?projectId=${subset.body.id}&entrance=mcp`, {
        token: alice.token,
      })
      expect(
        audit.body.items.find(
          (item: { id: string }) => item.id === (pinged._meta as Record<string, string>)['plinth/dispatchId'],
        ),
      ).toMatchObject({ projectId: subset.body.id })

      // A conversation of the project; another project's conversation is not found there.
      const inConversation = await connect(alice.token, `/mcp/projects/${projectId}/conversations/${conversationId}`)
      const called = await inConversation.client.callTool({ name: 'rdm__ping', arguments: {} })
      expect(called.isError ?? false).toBe(false)
      // The work-directory tools are offered only there: a project (or /mcp) has no work directory.
      const names = async (path: string) =>
        (await (await connect(alice.token, path)).client.listTools()).tools.map((tool) => tool.name)
      expect(await inConversation.client.listTools().then((list) => list.tools.map((tool) => tool.name))).toEqual(
        expect.arrayContaining(['read_file', 'list_files', 'write_file']),
      )
      for (const path of [`/mcp/projects/${projectId}`, '/mcp'])
        expect(await names(path), path).not.toEqual(expect.arrayContaining(['read_file']))
      const wrong = await post(
        `${server.url}/mcp/projects/${subset.body.id}/conversations/${conversationId}`,
        alice.token,
        JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      )
      expect(wrong.status).toBe(404)
    })

    it('does not run a call a person must approve: it answers with the decision, which POST /api/decisions/:id then runs', async () => {
      const { client } = await connect(alice.token, `/mcp/projects/${projectId}`)
      const result = await client.callTool({
        name: 'rdm__draft__compose',
        arguments: { title: 'Findings', body: 'The cache was cold.' },
      })
      expect(result.isError).toBe(true)
      const pending = result.structuredContent as {
        status: string
        decisionId: string
        dispatchId: string
        risk: string
        answer: { method: string; path: string }
      }
      expect(pending).toMatchObject({
        status: 'awaiting_decision',
        risk: 'high',
        answer: { method: 'POST', path: `/api/decisions/${pending.decisionId}` },
      })
      const text = (result.content as Array<{ text: string }>)[0]!.text
      expect(text).toContain(pending.decisionId)
      expect(text).toContain(`POST /api/decisions/${pending.decisionId}`)
      // Nothing was written yet.
      const before = await server.request('GET', `/api/projects/${projectId}/knowledge`, { token: alice.token })
      expect(before.body.items).toEqual([])

      const decided = await server.request('POST', pending.answer.path, {
        token: alice.token,
        body: { decision: 'approve' },
      })
      expect(decided.status).toBe(200)
      expect(decided.body.dispatch).toMatchObject({
        dispatchId: pending.dispatchId,
        status: 'succeeded',
        result: { title: 'Findings', status: 'draft', projectId },
      })
      const audit = await server.request('GET', `/api/audit?commandId=rdm.draft.compose&entrance=mcp`, {
        token: alice.token,
      })
      const envelope = audit.body.items.find((item: { id: string }) => item.id === pending.dispatchId)
      expect(envelope).toMatchObject({
        entrance: 'mcp',
        actor: { type: 'user', id: alice.user.id },
        projectId,
        risk: 'high',
        status: 'succeeded',
        decision: { id: pending.decisionId, outcome: 'approved', by: alice.user.id },
      })
      const after = await server.request('GET', `/api/projects/${projectId}/knowledge`, { token: alice.token })
      expect(after.body.items.map((item: { title: string }) => item.title)).toEqual(['Findings'])
    })

    it('offers the project’s knowledge as resources and its agent profile as a prompt; nothing of another’s', async () => {
      const project = (
        await server.request('POST', '/api/projects', {
          token: alice.token,
          body: { name: 'with knowledge', systemPrompt: 'You are the on-call helper. Be brief.' },
        })
      ).body
      const added = await server.request('POST', `/api/projects/${project.id}/knowledge`, {
        token: alice.token,
        body: { title: 'Runbook', text: 'Restart the cache first.\n\nThen check the queue depth.' },
      })
      expect(added.status).toBe(201)
      const { client } = await connect(alice.token, `/mcp/projects/${project.id}`)
      expect(client.getServerCapabilities()).toMatchObject({ resources: {}, prompts: {} })
      const { resources } = await client.listResources()
      expect(resources).toEqual([
        expect.objectContaining({
          uri: `plinth://knowledge/${added.body.id}`,
          title: 'Runbook',
          mimeType: 'text/plain',
          description: 'Knowledge item (draft, 1 chunk) of project with knowledge',
        }),
      ])
      const read = await client.readResource({ uri: resources[0]!.uri })
      expect(read.contents[0]).toMatchObject({
        uri: resources[0]!.uri,
        mimeType: 'text/plain',
        text: expect.stringContaining('Then check the queue depth.'),
      })
      const { prompts } = await client.listPrompts()
      expect(prompts).toEqual([
        expect.objectContaining({ name: 'agent_profile', title: 'with knowledge: agent profile' }),
      ])
      const prompt = await client.getPrompt({ name: 'agent_profile' })
      expect(prompt.messages).toEqual([
        { role: 'user', content: { type: 'text', text: 'You are the on-call helper. Be brief.' } },
      ])
      // Unknown names, an item of another project, and /mcp without a project.
      const missing = await client
        .readResource({ uri: 'plinth://knowledge/01JZZZZZZZZZZZZZZZZZZZZZZZ' })
        .catch((error: unknown) => error)
      expect((missing as McpError).code).toBe(-32002)
      expect(((await client.getPrompt({ name: 'nope' }).catch((error: unknown) => error)) as McpError).code).toBe(
        ErrorCode.InvalidParams,
      )
      const elsewhere = await connect(alice.token, `/mcp/projects/${projectId}`)
      expect((await elsewhere.client.listResources()).resources.map((resource) => resource.uri)).not.toContain(
        resources[0]!.uri,
      )
      expect(
        ((await elsewhere.client.readResource({ uri: resources[0]!.uri }).catch((error: unknown) => error)) as McpError)
          .code,
      ).toBe(-32002)
      const root = await connect(alice.token)
      expect((await root.client.listResources()).resources).toEqual([])
      expect((await root.client.listPrompts()).prompts).toEqual([])
      // Bob cannot read Alice's item through his own /mcp either.
      const bobs = await connect(bob.token)
      expect(
        ((await bobs.client.readResource({ uri: resources[0]!.uri }).catch((error: unknown) => error)) as McpError)
          .code,
      ).toBe(-32002)
    })

    it('answers malformed JSON-RPC with JSON-RPC errors (never a 500), and GET or a session-less DELETE with 405', async () => {
      const url = `${server.url}/mcp`
      const parse = await post(url, alice.token, '{"jsonrpc":"2.0", "id": 1, "method": ')
      expect(parse.status).toBe(400)
      expect(JSON.parse(parse.text)).toEqual({
        jsonrpc: '2.0',
        error: { code: ErrorCode.ParseError, message: 'Parse error: Invalid JSON' },
        id: null,
      })
      // Valid JSON that is no JSON-RPC message is an invalid request, not a parse error.
      for (const invalid of [{ hello: 'world' }, { jsonrpc: '2.0', id: null, method: 'tools/list' }, 3]) {
        const answer = await post(url, alice.token, JSON.stringify(invalid))
        expect([answer.status, JSON.parse(answer.text).error]).toEqual([
          400,
          { code: ErrorCode.InvalidRequest, message: expect.stringMatching(/^Invalid Request: /) },
        ])
      }
      const notRpc = await post(url, alice.token, JSON.stringify({ hello: 'world' }))
      const nul = await post(
        url,
        alice.token,
        JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: { name: 'rdm__ping', arguments: { target: 'a\u0000b' } },
        }),
      )
      expect(nul.status).toBe(400)
      expect(JSON.parse(nul.text).error).toMatchObject({
        code: ErrorCode.InvalidRequest,
        message: expect.stringContaining('NUL'),
      })
      const deep = await post(url, alice.token, `${'['.repeat(200)}${']'.repeat(200)}`)
      expect(deep.status).toBe(400)
      expect(JSON.parse(deep.text).error.code).toBe(ErrorCode.InvalidRequest)
      const proto = await post(url, alice.token, '{"jsonrpc":"2.0","id":1,"method":"tools/list","__proto__":{"x":1}}')
      expect(proto.status).toBe(400)
      const plain = await post(url, alice.token, 'hello', { 'content-type': 'text/plain' })
      expect(plain.status).toBe(415)
      expect(JSON.parse(plain.text).jsonrpc).toBe('2.0')
      const noAccept = await post(url, alice.token, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }), {
        accept: 'application/json',
      })
      expect(noAccept.status).toBe(406)
      const unknownMethod = await post(url, alice.token, JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'no/such' }))
      expect(JSON.parse(unknownMethod.text)).toMatchObject({ id: 7, error: { code: ErrorCode.MethodNotFound } })
      const badCall = await post(
        url,
        alice.token,
        JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tools/call', params: { arguments: 3 } }),
      )
      // Params the method's schema refuses: InvalidParams for that id, naming the field in a line.
      expect(badCall.status).toBe(200)
      expect(JSON.parse(badCall.text)).toEqual({
        jsonrpc: '2.0',
        id: 8,
        error: { code: ErrorCode.InvalidParams, message: expect.stringMatching(/^Invalid params: params\.name: .+$/) },
      })
      for (const params of [{}, { name: 'rdm__ping', arguments: 'x' }, undefined]) {
        const method = params === undefined ? 'initialize' : 'tools/call'
        const answer = await post(url, alice.token, JSON.stringify({ jsonrpc: '2.0', id: 9, method, params }))
        expect(JSON.parse(answer.text)).toMatchObject({ id: 9, error: { code: ErrorCode.InvalidParams } })
        expect(JSON.parse(answer.text).error.message).not.toContain('\n')
      }
      const batch = await post(
        url,
        alice.token,
        JSON.stringify([{ jsonrpc: '2.0', id: 1, method: 'tools/list' }, { nonsense: true }]),
      )
      expect(batch.status).toBe(400)
      for (const method of ['GET', 'DELETE']) {
        const answer = await fetch(url, {
          method,
          headers: { authorization: `Bearer ${alice.token}`, accept: 'text/event-stream' },
        })
        expect(answer.status).toBe(405)
        expect(answer.headers.get('allow')).toBe('POST, DELETE')
        expect(((await answer.json()) as { error: { code: number } }).error.code).toBe(-32000)
      }
      for (const answer of [parse, notRpc, nul, deep, proto, plain, noAccept, unknownMethod, badCall, batch])
        expect(answer.status).toBeLessThan(500)
    })

    it('carries the request id and rate-limit headers on MCP answers', async () => {
      const answer = await post(
        `${server.url}/mcp`,
        alice.token,
        JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
        { 'x-request-id': 'mcp-req-1' },
      )
      expect(answer.status).toBe(200)
      expect(answer.headers.get('x-request-id')).toBe('mcp-req-1')
      expect(answer.headers.get('x-ratelimit-limit')).toBeTruthy()
      expect(answer.headers.get('mcp-session-id')).toBeNull()
    })
  })

  describe(`MCP in a project shared read-only, on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let owner: TestUser
    let reader: TestUser
    let projectId: string
    const sharePlugin = new URL('./__fixtures__/plugins/read-only-share.ts', import.meta.url).pathname

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { plugins: [sharePlugin] })
      owner = await server.createUser()
      reader = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: owner.token, body: { name: 'shared' } })).body
        .id
    })
    afterAll(async () => {
      readOnlyShares.delete(projectId)
      await server?.close()
      await store?.close()
    })

    it('the ProjectAuthz adapter decides: a reader gets the read-only tools alone, and 404 once the share is gone', async () => {
      const path = `/mcp/projects/${projectId}`
      await expect(connectClient(server.url, reader.token, path)).rejects.toThrow(/404/)
      readOnlyShares.set(projectId, new Set([reader.user.id]))
      const mine = await connectClient(server.url, owner.token, path)
      const theirs = await connectClient(server.url, reader.token, path)
      try {
        const ownerTools = (await mine.client.listTools()).tools
        const readerTools = (await theirs.client.listTools()).tools
        expect(ownerTools.map((tool) => tool.name)).toContain('memory_remember')
        expect(readerTools.map((tool) => tool.name)).toEqual(
          ownerTools.filter((tool) => tool.annotations?.idempotentHint === true).map((tool) => tool.name),
        )
        expect(readerTools.map((tool) => tool.name)).toContain('list_projects')
        const refused = await theirs.client
          .callTool({ name: 'memory_remember', arguments: { text: 'x' } })
          .catch((error: unknown) => error)
        expect((refused as McpError).code).toBe(ErrorCode.InvalidParams)
        readOnlyShares.delete(projectId)
        await expect(theirs.client.listTools()).rejects.toThrow(/404/)
      } finally {
        await mine.client.close()
        await theirs.client.close()
      }
    })
  })
}

describe('MCP under the /api rate limits', () => {
  let store: Store
  let server: TestServer
  let user: TestUser

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      plugins: ['rdm'],
      rateLimit: { max: 4, windowMs: 60_000, addressMax: 1_000, authFailureMax: 2, authFailureWindowMs: 60_000 },
    })
    user = await server.createUser()
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('counts per token and blocks failed authentications per address — a valid token behind the address still works', async () => {
    const list = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' })
    for (let attempt = 0; attempt < 2; attempt++)
      expect((await post(`${server.url}/mcp`, 'wrong-token', list)).status).toBe(401)
    const blocked = await post(`${server.url}/mcp`, 'wrong-token', list)
    expect(blocked.status).toBe(429)
    expect(JSON.parse(blocked.text)).toMatchObject({ code: 'rate_limited' })
    expect((await post(`${server.url}/mcp`, undefined, list)).status).toBe(429)
    // The token's own budget: 4 a minute.
    const statuses: number[] = []
    for (let attempt = 0; attempt < 5; attempt++)
      statuses.push((await post(`${server.url}/mcp`, user.token, list)).status)
    expect(statuses).toEqual([200, 200, 200, 200, 429])
  })
})

describe('MCP when the client goes away mid-call', () => {
  let store: Store
  let server: TestServer
  let user: TestUser
  const slowPlugin = new URL('./__fixtures__/plugins/slow-tool.ts', import.meta.url).pathname

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { plugins: [slowPlugin] })
    user = await server.createUser()
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('the call still runs to its end and is audited (as from /api), and the server goes on answering', async () => {
    const abort = new AbortController()
    const call = fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${user.token}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'slow__brief', arguments: {} },
      }),
      signal: abort.signal,
    }).catch((error: unknown) => error)
    const audit = async () =>
      (await server.request('GET', '/api/audit?commandId=slow.brief&entrance=mcp', { token: user.token })).body
        .items as Array<{ status: string }>
    await waitFor(async () => (await audit()).length > 0, { timeoutMs: 30_000, what: 'the call to be audited' })
    abort.abort()
    expect(await call).toBeInstanceOf(Error)
    await waitFor(async () => (await audit())[0]?.status === 'succeeded', {
      timeoutMs: 30_000,
      what: 'the call to succeed',
    }).catch(() => undefined)
    expect((await audit())[0]).toMatchObject({ status: 'succeeded', result: { done: true } })
    const { client } = await connectClient(server.url, user.token)
    try {
      expect((await client.listTools()).tools.map((tool) => tool.name)).toContain('slow__brief')
    } finally {
      await client.close()
    }
  })
})
