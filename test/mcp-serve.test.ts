import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ConfigError, loadConfig } from '../src/app/index.js'
import { freePort, http, startServe, type ServeProcess } from './helpers/cli-process.js'

// `plinth serve` with MCP servers in its config file, as an operator runs it: the reference server
// (@modelcontextprotocol/server-everything) over stdio and over Streamable HTTP, and a server that
// wants a bearer token from the environment (docs/mcp.md).
const everything = fileURLToPath(
  new URL('../node_modules/@modelcontextprotocol/server-everything/dist/index.js', import.meta.url),
)
const toy = fileURLToPath(new URL('./__fixtures__/mcp/toy-server.mjs', import.meta.url))
const adminToken = 'admin-token-for-mcp-tests-0123456789'
const toySecret = 'toy-secret-never-logged-4242'
const everythingSecret = 'everything-env-secret-7373'

/** Whether process `pid` has exited within `ms`. */
async function goneWithin(pid: number, ms: number): Promise<boolean> {
  const alive = () => {
    try {
      process.kill(pid, 0)
      return true
    } catch {
      return false
    }
  }
  const deadline = Date.now() + ms
  while (alive() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50))
  return !alive()
}

/** Starts a child and waits for `ready` in its output. */
async function startChild(args: string[], env: Record<string, string>, ready: RegExp): Promise<ChildProcess> {
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let seen = ''
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${args.join(' ')} did not start: ${seen}`)), 60_000)
    const look = (chunk: Buffer) => {
      seen += chunk.toString('utf8')
      if (ready.test(seen)) {
        clearTimeout(timer)
        resolve()
      }
    }
    child.stdout?.on('data', look)
    child.stderr?.on('data', look)
    child.once('exit', (code) => reject(new Error(`${args.join(' ')} exited ${code}: ${seen}`)))
  })
  return child
}

describe('plinth serve with mounted MCP servers', () => {
  let dir: string
  let serve: ServeProcess
  let token: string
  const children: ChildProcess[] = []

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'plinth-mcp-serve-'))
    const everythingPort = await freePort()
    children.push(
      await startChild([everything, 'streamableHttp'], { PORT: String(everythingPort) }, /listening on port/i),
    )
    const toyPort = await freePort()
    children.push(await startChild([toy, 'http', String(toyPort)], { TOY_TOKEN: toySecret }, /listening \d+/))
    const config = {
      adminToken,
      mcpAuthorizationServers: ['https://auth.example.test'],
      dataDir: './data',
      mcpServers: [
        {
          name: 'everything',
          transport: 'stdio',
          command: process.execPath,
          args: [everything],
          risk: { default: 'low' },
          envFrom: { EVERYTHING_SECRET: 'EVERYTHING_SECRET_SOURCE' },
        },
        {
          name: 'everything_http',
          transport: 'http',
          url: `http://127.0.0.1:${everythingPort}/mcp`,
          risk: { default: 'low' },
        },
        {
          name: 'toy',
          transport: 'stdio',
          command: process.execPath,
          args: [toy],
          env: { TOY_LOG: './toy.log' },
          cwd: '.',
        },
        {
          name: 'toy_http',
          transport: 'http',
          url: `http://127.0.0.1:${toyPort}/mcp`,
          headersEnv: { Authorization: 'TOY_AUTHORIZATION' },
        },
      ],
    }
    await writeFile(join(dir, 'plinth.config.json'), JSON.stringify(config))
    serve = await startServe({
      cwd: dir,
      env: {
        TOY_AUTHORIZATION: `Bearer ${toySecret}`,
        EVERYTHING_SECRET_SOURCE: everythingSecret,
        PLINTH_LOG_LEVEL: 'debug',
      },
    })
    const created = await http(serve.url, 'POST', '/api/admin/users', { token: adminToken, body: { name: 'mcp-user' } })
    token = created.body.token.token
  })
  afterAll(async () => {
    await serve?.stop()
    for (const child of children) child.kill('SIGKILL')
    await rm(dir, { recursive: true, force: true })
  })

  it('mounts the reference server over stdio and over Streamable HTTP, and a server that needs a token', async () => {
    const catalog = (await http(serve.url, 'GET', '/api/commands', { token })).body.items as Array<{
      id: string
      plugin: string
      origin: Record<string, unknown> | null
    }>
    const echo = (server: string) => catalog.find((command) => command.id === `mcp.${server}.echo`)
    expect(echo('everything')).toMatchObject({
      plugin: 'mcp:everything',
      origin: { tool: 'echo', server: 'everything' },
    })
    expect(echo('everything_http')).toMatchObject({ plugin: 'mcp:everything_http' })
    expect(echo('toy_http')).toMatchObject({
      plugin: 'mcp:toy_http',
      origin: { serverName: 'toy-server', serverVersion: '1.2.3' },
    })
    // camelCase remote names become snake segments; the remote name stays in the catalog.
    const sum = catalog.find((command) => command.plugin === 'mcp:everything' && command.id.endsWith('.get_sum'))
    expect(sum?.origin?.tool).toMatch(/^get[-_]?[sS]um$/)
    for (const server of ['everything', 'everything_http', 'toy_http']) {
      const answer = await http(serve.url, 'POST', `/api/commands/mcp.${server}.echo`, {
        token,
        body: { entrance: 'button', params: server === 'toy_http' ? { text: 'hello' } : { message: 'hello' } },
      })
      expect(answer.status, JSON.stringify(answer.body)).toBe(200)
      expect(JSON.stringify(answer.body.result.content)).toMatch(/hello/i)
    }
    const ready = await http(serve.url, 'GET', '/readyz')
    expect(
      ready.body.warnings.filter(
        (warning: string) => warning.startsWith('MCP server') && warning.includes('not available'),
      ),
    ).toEqual([])
  })

  it('names the configured authorization servers in /mcp’s protected-resource metadata', async () => {
    const metadata = await http(serve.url, 'GET', '/.well-known/oauth-protected-resource/mcp')
    expect(metadata.body).toMatchObject({ authorization_servers: ['https://auth.example.test'] })
  })

  it('a value taken from the environment is redacted from results and the audit log, even when the server echoes it', async () => {
    // The reference server's get-env answers with its whole environment, envFrom's value included.
    const answer = await http(serve.url, 'POST', '/api/commands/mcp.everything.get_env', {
      token,
      body: { entrance: 'button', params: {} },
    })
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    expect(JSON.stringify(answer.body)).toContain('EVERYTHING_SECRET')
    expect(JSON.stringify(answer.body)).toContain('[redacted]')
    expect(JSON.stringify(answer.body)).not.toContain(everythingSecret)
    const audit = await http(serve.url, 'GET', '/api/audit?limit=20', { token })
    expect(JSON.stringify(audit.body)).toContain('mcp.everything.get_env')
    expect(JSON.stringify(audit.body)).not.toContain(everythingSecret)
    // The header secret, echoed back by a tool, likewise.
    const echoed = await http(serve.url, 'POST', '/api/commands/mcp.toy_http.echo', {
      token,
      body: { entrance: 'button', params: { text: `the server was sent Bearer ${toySecret}` } },
    })
    expect(JSON.stringify(echoed.body.result)).toContain('the server was sent [redacted]')
  })

  it('never writes the header secret to its log', () => {
    expect(serve.stdout()).not.toContain(toySecret)
    expect(serve.stderr()).not.toContain(toySecret)
  })

  it('stops its stdio servers when it stops', async () => {
    const answer = await http(serve.url, 'POST', '/api/commands/mcp.toy.echo', {
      token,
      body: { entrance: 'button', params: { text: 'x' } },
    })
    expect(answer.status).toBe(200)
    const pid = Number(/start (\d+)/.exec(await readFile(join(dir, 'toy.log'), 'utf8'))?.[1])
    expect(pid).toBeGreaterThan(0)
    expect(await serve.stop()).toBe(0)
    expect(await goneWithin(pid, 15_000)).toBe(true)
  })
})

describe('mcpServers configuration', () => {
  const stdio = { name: 'files', transport: 'stdio', command: 'node', args: ['server.js'] }

  it('PLINTH_MCP_SERVERS (JSON) replaces the file’s list', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plinth-mcp-config-'))
    try {
      await writeFile(
        join(dir, 'plinth.config.json'),
        JSON.stringify({ mcpServers: [stdio, { ...stdio, name: 'other' }] }),
      )
      expect(loadConfig({}, dir).mcpServers.map((server) => server.name)).toEqual(['files', 'other'])
      const replaced = loadConfig(
        { PLINTH_MCP_SERVERS: JSON.stringify([{ name: 'web', transport: 'http', url: 'https://example.test/mcp' }]) },
        dir,
      )
      expect(replaced.mcpServers).toEqual([{ name: 'web', transport: 'http', url: 'https://example.test/mcp' }])
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('refuses bad entries with every problem named', () => {
    const problems = (servers: unknown): string[] => {
      try {
        loadConfig({ PLINTH_MCP_SERVERS: JSON.stringify(servers) }, tmpdir())
      } catch (error) {
        if (error instanceof ConfigError) return error.problems
        throw error
      }
      throw new Error('no ConfigError')
    }
    expect(problems([{ name: 'Bad-Name', transport: 'stdio', command: 'x' }]).join('\n')).toMatch(
      /mcpServers\[0\]\.name/,
    )
    expect(problems([{ name: 'a', transport: 'stdio' }])).toContain(
      'mcpServers[0].command: required for transport stdio',
    )
    expect(problems([{ name: 'a', transport: 'http' }])).toContain('mcpServers[0].url: required for transport http')
    expect(problems([stdio, stdio])).toContain('mcpServers[1].name: "files" is used twice')
    expect(problems([{ ...stdio, risk: { default: 'extreme' } }]).join('\n')).toMatch(/mcpServers\[0\]\.risk\.default/)
    expect(problems([{ ...stdio, headers: { a: 1 } }]).join('\n')).toMatch(/mcpServers\[0\]\.headers/)
    expect(problems([{ ...stdio, auth: { type: 'oauth' } }])).toContain(
      'mcpServers[0].auth: OAuth applies to transport http only',
    )
    try {
      loadConfig({ PLINTH_MCP_SERVERS: '[not json' }, tmpdir())
      throw new Error('no ConfigError')
    } catch (error) {
      expect((error as ConfigError).problems).toContain('PLINTH_MCP_SERVERS: expected JSON, got "[not json"')
    }
  })
})

describe('plinth serve stopped while a stdio MCP server never finished starting', () => {
  it('stops the child too, not leaving it running', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plinth-mcp-hang-'))
    const config = {
      adminToken,
      dataDir: './data',
      mcpServers: [
        {
          name: 'hangs',
          transport: 'stdio',
          command: process.execPath,
          args: [toy],
          env: { TOY_HANG: '1', TOY_LOG: './hang.log' },
          cwd: '.',
          startTimeoutMs: 1_000,
        },
      ],
    }
    await writeFile(join(dir, 'plinth.config.json'), JSON.stringify(config))
    const serve = await startServe({ cwd: dir })
    try {
      const created = await http(serve.url, 'POST', '/api/admin/users', { token: adminToken, body: { name: 'u' } })
      // The catalog starts the server (lazily), which never answers initialize: its start times out.
      await http(serve.url, 'GET', '/api/commands', { token: created.body.token.token })
      const pid = Number(/start (\d+)/.exec(await readFile(join(dir, 'hang.log'), 'utf8'))?.[1])
      expect(pid).toBeGreaterThan(0)
      const deadline = Date.now() + 30_000
      while (Date.now() < deadline) {
        const warnings = (await http(serve.url, 'GET', '/readyz')).body.warnings as string[]
        if (warnings.some((warning) => warning.includes('did not answer initialize'))) break
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      expect(await serve.stop()).toBe(0)
      const gone = await goneWithin(pid, 15_000)
      if (!gone) process.kill(pid, 'SIGKILL')
      expect(gone).toBe(true)
    } finally {
      await serve.stop()
      await rm(dir, { recursive: true, force: true })
    }
  })
})
