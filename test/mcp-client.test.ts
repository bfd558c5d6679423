import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { openSse } from './helpers/sse-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// Mounted MCP servers: each remote tool is a command mcp.<server>.<tool> on the one bus (docs/mcp.md).
const toy = new URL('./__fixtures__/mcp/toy-server.mjs', import.meta.url).pathname

async function until<T>(what: string, probe: () => Promise<T | undefined | false>, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await probe()
    if (value) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

describe('MCP client: a mounted stdio server', () => {
  let store: Store
  let server: TestServer
  let model: ScriptedModel
  let alice: TestUser
  let dir: string
  let log: string

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'plinth-mcp-'))
    log = join(dir, 'toy.log')
    store = await openTestStore('pglite')
    model = new ScriptedModel({ id: 'scripted', turns: [] })
    server = await startTestServer(store, {
      models: [model],
      resultMaxBytes: 64 * 1024,
      mcpServers: [
        {
          name: 'toy',
          transport: 'stdio',
          command: process.execPath,
          args: [toy],
          env: { TOY_LOG: log, TOY_COLLIDE: '1' },
          risk: { perTool: { grow: 'low', crash: 'low', fail: 'low' } },
          timeoutMs: 2_000,
        },
        {
          name: 'hangs',
          transport: 'stdio',
          command: process.execPath,
          args: [toy],
          env: { TOY_HANG: '1' },
          startTimeoutMs: 1_500,
        },
        { name: 'missing', transport: 'stdio', command: join(dir, 'no-such-program') },
        {
          name: 'noisy',
          transport: 'stdio',
          command: process.execPath,
          args: [toy],
          env: { TOY_GARBAGE: '1' },
          tools: { include: ['echo'] },
        },
      ],
    })
    alice = await server.createUser()
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
    await rm(dir, { recursive: true, force: true })
  })

  const commands = async () =>
    (await server.request('GET', '/api/commands', { token: alice.token })).body.items as Array<Record<string, unknown>>
  const dispatch = (id: string, params: Record<string, unknown>) =>
    server.request('POST', `/api/commands/${id}`, { token: alice.token, body: { entrance: 'button', params } })

  it('lists each tool as a command with its mapped name, original name, risk from annotations and plugin mcp:<server>', async () => {
    const items = await commands()
    const byId = new Map(items.map((item) => [item.id, item]))
    expect(byId.get('mcp.toy.echo')).toMatchObject({
      title: 'Echo',
      risk: 'low',
      plugin: 'mcp:toy',
      exposeAsTool: { name: 'mcp__toy__echo' },
      paramsSchema: { type: 'object', required: ['text'] },
      origin: {
        type: 'mcp',
        server: 'toy',
        serverName: 'toy-server',
        serverVersion: '1.2.3',
        tool: 'echo',
        openWorldHint: false,
      },
    })
    expect(byId.get('mcp.toy.delete_thing')).toMatchObject({
      risk: 'high',
      origin: { tool: 'delete-thing', openWorldHint: true },
    })
    expect(byId.get('mcp.toy.fail')).toMatchObject({ risk: 'low' }) // the operator's override
    expect(byId.get('mcp.toy.liar')).toMatchObject({ risk: 'medium' }) // no hints
    expect(byId.get('mcp.toy.grow')).toMatchObject({ risk: 'low' })
    // Names that collide once mapped, and a tool whose schema is not an object, are refused; the rest stay.
    expect(byId.has('mcp.toy.get_env')).toBe(false)
    expect(byId.has('mcp.toy.bad_schema')).toBe(false)
    expect(
      [...byId.keys()].some((id) => String(id).startsWith('mcp.hangs.') || String(id).startsWith('mcp.missing.')),
    ).toBe(false)
  })

  it('/readyz names the servers that are down and the refused tools, and stays ready', async () => {
    const ready = await server.request('GET', '/readyz')
    expect(ready.status).toBe(200)
    const warnings = ready.body.warnings as string[]
    expect(warnings.find((warning) => warning.includes('MCP server hangs'))).toMatch(
      /did not answer initialize within 1500 ms/,
    )
    expect(warnings.find((warning) => warning.includes('MCP server missing'))).toMatch(/not available/)
    expect(warnings.some((warning) => warning.includes('"get-env" and "get_env" refused'))).toBe(true)
    expect(warnings.some((warning) => warning.includes('mcp.toy.bad_schema refused'))).toBe(true)
  })

  it('a button dispatch runs the remote tool; the envelope records the server and the tool', async () => {
    const answer = await dispatch('mcp.toy.echo', { text: 'hi' })
    expect(answer.status).toBe(200)
    expect(answer.body.result).toEqual({
      content: [{ type: 'text', text: 'echo: hi' }],
      structuredContent: { text: 'hi' },
    })
    const audit = (await server.request('GET', '/api/audit?commandId=mcp.toy.echo', { token: alice.token })).body
      .items[0]
    expect(audit).toMatchObject({
      plugin: 'mcp:toy',
      pluginVersion: '1.2.3',
      entrance: 'button',
      status: 'succeeded',
      origin: { type: 'mcp', server: 'toy', serverName: 'toy-server', tool: 'echo' },
    })
    // Params are validated against the tool's inputSchema before anything is sent.
    const invalid = await dispatch('mcp.toy.echo', { text: 5 })
    expect(invalid.body).toMatchObject({ status: 400, code: 'validation_failed' })
  })

  it('survives a server that writes malformed messages; an unknown server or tool is an unknown command', async () => {
    expect(
      (await commands()).filter((item) => String(item.id).startsWith('mcp.noisy.')).map((item) => item.id),
    ).toEqual(['mcp.noisy.echo'])
    const answer = await dispatch('mcp.noisy.echo', { text: 'through the noise' })
    expect(answer.status).toBe(200)
    expect(answer.body.result.content[0].text).toBe('echo: through the noise')
    expect((await dispatch('mcp.nosuch.echo', {})).body).toMatchObject({ status: 404, code: 'unknown_command' })
    expect((await dispatch('mcp.toy.nosuch', {})).body).toMatchObject({ status: 404, code: 'unknown_command' })
  })

  it('a mounted tool is offered again to MCP clients of Plinth’s own /mcp, through the bus', async () => {
    const client = new Client({ name: 'test', version: '0' })
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${alice.token}` } },
      }),
    )
    try {
      const { tools } = await client.listTools()
      expect(tools.find((tool) => tool.name === 'mcp__toy__echo')?.annotations).toMatchObject({ readOnlyHint: true })
      const result = await client.callTool({ name: 'mcp__toy__echo', arguments: { text: 'relayed' } })
      expect(JSON.stringify(result.content)).toContain('echo: relayed')
      const audit = (
        await server.request('GET', '/api/audit?commandId=mcp.toy.echo&entrance=mcp', { token: alice.token })
      ).body.items[0]
      expect(audit).toMatchObject({ entrance: 'mcp', plugin: 'mcp:toy', origin: { tool: 'echo' } })
    } finally {
      await client.close()
    }
  })

  it('isError becomes a command error the caller reads; output that breaks its schema is refused', async () => {
    const failed = await dispatch('mcp.toy.fail', {})
    expect(failed.body).toMatchObject({ code: 'command_error', commandCode: 'mcp_tool_error' })
    expect(failed.body.detail).toContain('the widget is broken')
    // Medium risk in manual mode: it runs once a person approves, and then fails.
    const liar = await dispatch('mcp.toy.liar', {})
    expect(liar.status).toBe(202)
    const approved = await server.request('POST', `/api/decisions/${liar.body.decision.id}`, {
      token: alice.token,
      body: { decision: 'approve' },
    })
    expect(approved.body.dispatch).toMatchObject({ status: 'failed', error: { code: 'mcp_invalid_result' } })
  })

  it('images and huge results fit a command result, marked truncated', async () => {
    const image = await dispatch('mcp.toy.image', {})
    expect(image.body.result.content[1]).toMatchObject({ type: 'image', mimeType: 'image/png' })
    const big = await dispatch('mcp.toy.big', { bytes: 500_000 })
    expect(big.status).toBe(200)
    expect(big.body.result.truncated).toBe(true)
    expect(JSON.stringify(big.body.result).length).toBeLessThanOrEqual(64 * 1024)
  })

  it('an image a tool returns in a conversation is kept as a file of it, named in the result', async () => {
    const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'pics' } }))
      .body.id
    const conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    const image = await server.request('POST', '/api/commands/mcp.toy.image', {
      token: alice.token,
      body: { entrance: 'button', conversationId, params: {} },
    })
    expect(image.status).toBe(200)
    const item = image.body.result.content[1]
    expect(item).toEqual({
      type: 'image',
      mimeType: 'image/png',
      path: expect.stringMatching(/^\.tool-images\/[0-9a-f]{24}\.png$/),
      width: 1,
      height: 1,
      bytes: expect.any(Number),
    })
    const file = await server.exec.workdirs.read(conversationId, item.path, { limit: 1024 })
    expect(file.bytes.subarray(1, 4).toString('latin1')).toBe('PNG')
  })

  it('a call past its timeout is cancelled over the protocol', async () => {
    const slow = await dispatch('mcp.toy.slow', { ms: 20_000 })
    expect(slow.body.code).toBe('command_timeout')
    await until('the server to hear notifications/cancelled', async () =>
      (await readFile(log, 'utf8')).includes('cancelled'),
    )
  })

  it('tools/list_changed refreshes the catalog, and project and conversation streams carry commands.changed', async () => {
    expect((await commands()).some((item) => item.id === 'mcp.toy.extra')).toBe(false)
    const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'catalog' } }))
      .body.id as string
    const conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id as string
    // Followed live from the end of the log: the change arrives as it happens.
    const onProject = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: alice.token })
    const onConversation = await openSse(`${server.url}/api/conversations/${conversationId}/events`, {
      token: alice.token,
    })
    try {
      const seen = onProject.events.length
      expect((await dispatch('mcp.toy.grow', {})).status).toBe(200)
      await until('mcp.toy.extra in the catalog', async () =>
        (await commands()).some((item) => item.id === 'mcp.toy.extra'),
      )
      const changed = await until('commands.changed on the project stream', async () =>
        onProject.events
          .slice(seen)
          .find((event) => event.event === 'commands.changed' && event.data.commandIds.includes('mcp.toy.extra')),
      )
      expect(changed.data).toMatchObject({
        plugin: 'mcp:toy',
        commandIds: expect.arrayContaining(['mcp.toy.echo', 'mcp.toy.extra']),
      })
      await until('commands.changed on the conversation stream', async () =>
        onConversation.events.find((event) => event.event === 'commands.changed' && event.id === changed.id),
      )
      // Replayed too, for a client that reconnects after it.
      const replay = await openSse(`${server.url}/api/projects/${projectId}/events`, {
        token: alice.token,
        lastEventId: String(Number(changed.id) - 1),
      })
      try {
        expect((await replay.waitFor(1, 30_000))[0]).toMatchObject({ id: changed.id, event: 'commands.changed' })
      } finally {
        replay.close()
      }
    } finally {
      onProject.close()
      onConversation.close()
    }
  })

  it('a crash mid-call fails that call; the server is started again and answers', async () => {
    const crashed = await dispatch('mcp.toy.crash', {})
    expect(crashed.body).toMatchObject({ code: 'command_error', commandCode: 'mcp_unavailable' })
    const again = await until('the restarted server to answer', async () => {
      const answer = await dispatch('mcp.toy.echo', { text: 'back' })
      return answer.status === 200 ? answer : undefined
    })
    expect(again.body.result.content[0].text).toBe('echo: back')
    const starts = (await readFile(log, 'utf8')).split('\n').filter((line) => line.startsWith('start '))
    expect(starts.length).toBeGreaterThanOrEqual(2)
  })

  it('the model calls a mounted tool by its projected name; a destructive one waits for a person', async () => {
    const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'mcp' } }))
      .body.id
    const conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    model.setTurns([
      { toolCalls: [{ name: 'mcp__toy__echo', arguments: { text: 'from the model' } }] },
      { toolCalls: [{ name: 'mcp__toy__delete_thing', arguments: { name: 'x' } }] },
      { text: 'done' },
    ])
    const run = (
      await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'go', knowledge: { autoInject: false } },
      })
    ).body
    const waiting = await until('the run to wait for a person', async () => {
      const current = (await server.request('GET', `/api/runs/${run.id}`, { token: alice.token })).body
      return ['requires_action', 'completed', 'failed'].includes(current.status) ? current : undefined
    })
    expect(waiting.status).toBe('requires_action')
    const decision = waiting.requiredAction.decisions[0]
    expect(decision).toMatchObject({ commandId: 'mcp.toy.delete_thing', risk: 'high' })
    expect(
      (
        await server.request('POST', `/api/decisions/${decision.decisionId}`, {
          token: alice.token,
          body: { decision: 'approve' },
        })
      ).status,
    ).toBe(200)
    const done = await until('the run to complete', async () => {
      const current = (await server.request('GET', `/api/runs/${run.id}`, { token: alice.token })).body
      return ['completed', 'failed'].includes(current.status) ? current : undefined
    })
    expect(done.status).toBe('completed')
    const agent = (
      await server.request('GET', `/api/audit?commandId=mcp.toy.delete_thing&entrance=agent`, { token: alice.token })
    ).body.items[0]
    const button = await dispatch('mcp.toy.delete_thing', { name: 'y' })
    expect(button.status).toBe(202)
    const human = (
      await server.request('GET', `/api/audit?commandId=mcp.toy.delete_thing&entrance=button`, { token: alice.token })
    ).body.items[0]
    // One envelope shape whatever the entrance: same plugin, version and origin.
    for (const key of ['plugin', 'pluginVersion', 'origin', 'commandId', 'risk'] as const)
      expect(agent[key]).toEqual(human[key])
    expect(agent.status).toBe('succeeded')
    expect((await readFile(log, 'utf8')).includes('call delete-thing {"name":"x"}')).toBe(true)
    expect((await readFile(log, 'utf8')).includes('call delete-thing {"name":"y"}')).toBe(false)
  })
})
