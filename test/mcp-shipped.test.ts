import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pino } from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Writable } from 'node:stream'
import { createLogger, setUpCommandBus } from '../src/app/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// A plugin that ships an MCP server (Registry.addMcpServer, surface 1.6.0): mounted like a configured
// one, replaced by a configured one of the same name, refused at load when malformed (docs/mcp.md).
const shipper = new URL('./__fixtures__/plugins/mcp-shipper.ts', import.meta.url).pathname
const badShipper = new URL('./__fixtures__/plugins/mcp-shipper-bad.ts', import.meta.url).pathname
const secretShipper = new URL('./__fixtures__/plugins/mcp-shipper-secret.ts', import.meta.url).pathname
const toy = new URL('./__fixtures__/mcp/toy-server.mjs', import.meta.url).pathname

describe('MCP servers that plugins ship', () => {
  let store: Store
  const servers: TestServer[] = []
  let user: TestUser

  beforeAll(async () => {
    store = await openTestStore('pglite')
  })
  afterAll(async () => {
    for (const server of servers) await server.close()
    await store?.close()
  })

  const commandsOf = async (
    server: TestServer,
    token: string,
  ): Promise<Array<{ id: string; plugin: string; risk: string; origin: { server: string } | null }>> =>
    (await server.request('GET', '/api/commands', { token })).body.items

  it('mounts the shipped server’s tools as commands of plugin mcp:<name>, through the bus', async () => {
    const server = await startTestServer(store, { plugins: [shipper] })
    servers.push(server)
    user = await server.createUser()
    const shipped = (await commandsOf(server, user.token)).filter((command) => command.plugin === 'mcp:shipped')
    expect(shipped.map((command) => command.id).sort()).toEqual(['mcp.shipped.delete_thing', 'mcp.shipped.echo'])
    expect(shipped.find((command) => command.id === 'mcp.shipped.echo')).toMatchObject({
      risk: 'low',
      origin: { server: 'shipped' },
    })
    const echoed = await server.request('POST', '/api/commands/mcp.shipped.echo', {
      token: user.token,
      body: { entrance: 'button', params: { text: 'shipped' } },
    })
    expect(echoed.status).toBe(200)
    expect(JSON.stringify(echoed.body.result)).toContain('shipped')
    // The destructive one waits for a person, as any high-risk command.
    const wiped = await server.request('POST', '/api/commands/mcp.shipped.delete_thing', {
      token: user.token,
      body: { entrance: 'button', params: { name: 'x' } },
    })
    expect(wiped.status).toBe(202)
    expect(wiped.body).toMatchObject({ status: 'awaiting_decision' })
    await server.close()
    servers.pop()
  })

  it('a configured server of the same name replaces the shipped one', async () => {
    const server = await startTestServer(store, {
      plugins: [shipper],
      mcpServers: [
        { name: 'shipped', transport: 'stdio', command: process.execPath, args: [toy], tools: { include: ['fail'] } },
      ],
    })
    servers.push(server)
    const other = await server.createUser()
    const shipped = (await commandsOf(server, other.token)).filter((command) => command.plugin === 'mcp:shipped')
    expect(shipped.map((command) => command.id)).toEqual(['mcp.shipped.fail'])
  })

  it('a shipped server’s credentials are scrubbed from the logs like a configured one’s', async () => {
    const lines: string[] = []
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString())
        done()
      },
    })
    const secret = 'shipped-secret-value-0123456789'
    process.env.PLINTH_TEST_SHIPPED_SECRET = secret
    const logger = createLogger('debug', sink)
    const dataDir = await mkdtemp(join(tmpdir(), 'plinth-shipper-log-'))
    const setup = await setUpCommandBus(store, {
      plugins: [secretShipper],
      dataDir,
      exec: { backend: 'direct' },
      logger,
      actionTtlMs: 60_000,
      allowanceTtlMs: 60_000,
    })
    try {
      logger.info({ leaked: `token=${secret}` }, `a line that carries ${secret}`)
      const joined = lines.join('')
      expect(joined).toContain('a line that carries [redacted]')
      expect(joined).not.toContain(secret)
    } finally {
      await setup.mcp.stop()
      delete process.env.PLINTH_TEST_SHIPPED_SECRET
      await rm(dataDir, { recursive: true, force: true })
    }
  })

  it('a malformed shipped server refuses its plugin at load, naming what is wrong', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'plinth-bad-shipper-'))
    const setup = await setUpCommandBus(store, {
      plugins: [badShipper],
      dataDir,
      exec: { backend: 'direct' },
      logger: pino({ level: 'silent' }),
      actionTtlMs: 60_000,
      allowanceTtlMs: 60_000,
    })
    try {
      expect(setup.refusedPlugins).toHaveLength(1)
      expect(setup.refusedPlugins[0]!.reason).toContain('MCP server "broken"')
      expect(setup.refusedPlugins[0]!.reason).toContain('command: required for transport stdio')
      expect(setup.refusedPlugins[0]!.reason).toContain('cwd: must be an absolute path')
      expect(setup.catalog.mcpServers).toEqual([])
    } finally {
      await setup.mcp.stop()
      await rm(dataDir, { recursive: true, force: true })
    }
  })
})
