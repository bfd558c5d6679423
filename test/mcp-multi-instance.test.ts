import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { createTestDatabase, testEngines, type TestDatabase } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// /mcp keeps its sessions in Postgres, so two instances on one Postgres behind a
// round-robin balancer serve one MCP client — initialized on one, listing and calling on the other.
const engines = testEngines()
if (!engines.includes('postgres'))
  console.warn('[plinth tests] skipping the two-instance MCP test: it needs Postgres (TEST_DATABASE_URL)')

describe.skipIf(!engines.includes('postgres'))('MCP across two instances on one Postgres', () => {
  let database: TestDatabase
  const stores: Store[] = []
  const servers: TestServer[] = []
  let user: TestUser
  let projectId: string

  beforeAll(async () => {
    database = await createTestDatabase('postgres')
    for (let index = 0; index < 2; index++) {
      const store = await database.open()
      stores.push(store)
      servers.push(await startTestServer(store, { plugins: ['rdm'] }))
    }
    user = await servers[0]!.createUser()
    projectId = (await servers[0]!.request('POST', '/api/projects', { token: user.token, body: { name: 'balanced' } }))
      .body.id
  }, 120_000)
  afterAll(async () => {
    for (const server of servers) await server.close()
    for (const store of stores) await store.close()
    await database?.drop()
  })

  it('one SDK client whose requests alternate between the instances: initialize on one, list and call on the other', async () => {
    const [a, b] = servers as [TestServer, TestServer]
    const served: Array<[string, string]> = []
    let turn = 0
    // A round-robin balancer in miniature: requests alternate (notifications and the GET the client
    // tries for a stream go wherever the turn is, but do not take one).
    const balanced = async (input: string | URL, init?: RequestInit): Promise<Response> => {
      const body =
        typeof init?.body === 'string' ? (JSON.parse(init.body) as { method?: string; id?: unknown }) : undefined
      const isRequest = body?.id !== undefined
      const target = turn % 2 === 0 ? a : b
      if (isRequest) turn++
      const url = new URL(input)
      served.push([target === a ? 'a' : 'b', `${init?.method ?? 'GET'} ${body?.method ?? ''}`.trim()])
      return fetch(new URL(url.pathname + url.search, target.url), init)
    }
    const transport = new StreamableHTTPClientTransport(new URL(`/mcp/projects/${projectId}`, a.url), {
      requestInit: { headers: { authorization: `Bearer ${user.token}` } },
      fetch: balanced,
    })
    const client = new Client({ name: 'balanced', version: '1.0.0' })
    await client.connect(transport)
    try {
      expect(transport.sessionId).toMatch(/^[0-9a-f-]{36}$/)
      const tools = (await client.listTools()).tools.map((tool) => tool.name)
      expect(tools).toContain('rdm__ping')
      const pinged = await client.callTool({ name: 'rdm__ping', arguments: { target: 'balanced' } })
      expect(pinged.structuredContent).toMatchObject({ pong: true, target: 'balanced' })
      const asked = await client.callTool({
        name: 'rdm__draft__compose',
        arguments: { title: 'Across', body: 'two instances' },
      })
      const pending = asked.structuredContent as { status: string; decisionId: string; answer: { path: string } }
      expect(pending.status).toBe('awaiting_decision')
      // Listed again on the other instance: the same list.
      expect((await client.listTools()).tools.map((tool) => tool.name)).toEqual(tools)

      const requests = served.filter(([, what]) => /^POST (initialize|tools\/)/.test(what))
      expect(requests.map(([, what]) => what)).toEqual([
        'POST initialize',
        'POST tools/list',
        'POST tools/call',
        'POST tools/call',
        'POST tools/list',
      ])
      expect(requests.map(([instance]) => instance)).toEqual(['a', 'b', 'a', 'b', 'a'])

      // The decision asked on one instance is answered on the other, and runs there.
      const asker = requests[3]![0] === 'a' ? a : b
      const other = asker === a ? b : a
      const decided = await other.request('POST', pending.answer.path, {
        token: user.token,
        body: { decision: 'approve' },
      })
      expect(decided.status).toBe(200)
      expect(decided.body.dispatch).toMatchObject({ status: 'succeeded', result: { title: 'Across', projectId } })
      const audit = await asker.request('GET', '/api/audit?entrance=mcp', { token: user.token })
      expect(audit.body.items.map((item: { commandId: string }) => item.commandId).sort()).toEqual([
        'rdm.draft.compose',
        'rdm.ping',
      ])
    } finally {
      await client.close()
    }
  })

  it('a call asked through elicitation on one instance is answered through the other, and its result comes back', async () => {
    const [a, b] = servers as [TestServer, TestServer]
    const served: Array<[string, string]> = []
    let turn = 0
    const balanced = async (input: string | URL, init?: RequestInit): Promise<Response> => {
      const body =
        typeof init?.body === 'string' ? (JSON.parse(init.body) as { method?: string; id?: unknown }) : undefined
      const target = turn % 2 === 0 ? a : b
      if (body?.id !== undefined) turn++
      served.push([
        target === a ? 'a' : 'b',
        body?.method ?? (body?.id !== undefined ? `answer ${String(body.id)}` : (init?.method ?? 'GET')),
      ])
      const url = new URL(input)
      return fetch(new URL(url.pathname + url.search, target.url), init)
    }
    const transport = new StreamableHTTPClientTransport(new URL(`/mcp/projects/${projectId}`, a.url), {
      requestInit: { headers: { authorization: `Bearer ${user.token}` } },
      fetch: balanced,
    })
    const client = new Client({ name: 'balanced-asking', version: '1.0.0' }, { capabilities: { elicitation: {} } })
    client.setRequestHandler(ElicitRequestSchema, () => ({ action: 'accept', content: { decision: 'approve' } }))
    await client.connect(transport)
    try {
      const result = await client.callTool({
        name: 'rdm__draft__compose',
        arguments: { title: 'Elicited', body: 'across instances' },
      })
      expect(result.isError ?? false).toBe(false)
      expect(result.structuredContent).toMatchObject({ title: 'Elicited', projectId })
      const call = served.findIndex(([, what]) => what === 'tools/call')
      const answer = served.findIndex(([, what]) => what.startsWith('answer plinth-decision:'))
      expect(call).toBeGreaterThanOrEqual(0)
      expect(answer).toBeGreaterThan(call)
      // The question came from the instance holding the call; the answer reached the other one.
      expect(served[answer]![0]).not.toBe(served[call]![0])
    } finally {
      await client.close()
    }
  })
})
