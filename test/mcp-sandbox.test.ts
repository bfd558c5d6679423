import { execFileSync } from 'node:child_process'
import { chmod, mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises'
import { homedir, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { build } from 'esbuild'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ConfigError, loadConfig } from '../src/app/index.js'
import { ScriptedModel } from '../src/llm/index.js'
import type { McpServerConfig } from '../src/mcp/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { sandboxAvailable, sandboxUser, sandboxUserProcesses } from './helpers/sandbox.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// `sandbox: true` stdio MCP servers (docs/mcp.md, "Sandboxed stdio servers"): inside bwrap, one process per
// conversation in its work directory, never started outside the sandbox.
const toy = new URL('./__fixtures__/mcp/toy-server.mjs', import.meta.url).pathname
const probe = await sandboxAvailable('sandboxed MCP servers')

async function until<T>(
  what: string,
  check: () => Promise<T | undefined | false> | T | undefined | false,
  ms = 30_000,
): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await check()
    if (value) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/**
 * The toy server bundled into one file in a directory of its own: the sandbox binds it read-only (the
 * repository, with its node_modules, may live under /work, which is the work directory inside the sandbox).
 */
async function bundleToy(): Promise<{ dir: string; file: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'plinth-mcp-toy-'))
  await chmod(dir, 0o755)
  const file = join(dir, 'toy-server.mjs')
  // Only the stdio mode runs here: the HTTP and OAuth modes' imports stay out of the bundle.
  await build({
    entryPoints: [toy],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    outfile: file,
    external: ['express', '@modelcontextprotocol/sdk/server/auth/*', '@modelcontextprotocol/sdk/examples/*'],
    logLevel: 'error',
  })
  await chmod(file, 0o644)
  return { dir, file }
}

/** The toy's node processes still running as the sandbox user, for a marker argument. */
function toyProcesses(marker: string): string[] {
  return sandboxUserProcesses().filter((line) => line.trim().split(/\s+/)[2] === 'node' && line.includes(marker))
}

describe('mcpServers[].sandbox configuration', () => {
  const problems = (servers: unknown): string[] => {
    try {
      loadConfig({ PLINTH_MCP_SERVERS: JSON.stringify(servers) }, tmpdir())
    } catch (error) {
      if (error instanceof ConfigError) return error.problems
      throw error
    }
    return []
  }
  const stdio = { name: 'files', transport: 'stdio', command: 'node', args: ['server.js'] }

  it('takes sandbox, network, mounts, idleTimeoutMs and maxProcesses for stdio servers (PLINTH_MCP_SERVERS too)', () => {
    const entry = {
      ...stdio,
      sandbox: true,
      network: true,
      mounts: ['/opt/servers'],
      idleTimeoutMs: 60_000,
      maxProcesses: 3,
    }
    expect(problems([entry])).toEqual([])
    expect(loadConfig({ PLINTH_MCP_SERVERS: JSON.stringify([entry]) }, tmpdir()).mcpServers[0]).toMatchObject(entry)
  })

  it('refuses sandbox for http, cwd with sandbox, sandbox-only keys without it, relative mounts from the environment', () => {
    expect(problems([{ name: 'web', transport: 'http', url: 'https://example.test/mcp', sandbox: true }])).toContain(
      'mcpServers[0].sandbox: only for transport stdio',
    )
    expect(problems([{ ...stdio, sandbox: true, cwd: '/srv' }])).toContain(
      "mcpServers[0].cwd: not with sandbox (a sandboxed server runs in the conversation's work directory)",
    )
    expect(problems([{ ...stdio, network: true, maxProcesses: 2 }])).toEqual([
      'mcpServers[0].network: only with sandbox: true',
      'mcpServers[0].maxProcesses: only with sandbox: true',
    ])
    expect(problems([{ ...stdio, sandbox: true, mounts: ['servers'] }])).toContain(
      'mcpServers[0].mounts[0]: must be an absolute path (in the file: relative to the file)',
    )
    expect(problems([{ ...stdio, sandbox: 'yes' }]).join('\n')).toMatch(/mcpServers\[0\]\.sandbox/)
  })

  it('resolves mounts in the file relative to the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plinth-mcp-config-'))
    try {
      await writeFile(
        join(dir, 'plinth.config.json'),
        JSON.stringify({ mcpServers: [{ ...stdio, sandbox: true, mounts: ['./servers', '/opt/x'] }] }),
      )
      expect(loadConfig({}, dir).mcpServers[0]!.mounts).toEqual([join(dir, 'servers'), '/opt/x'])
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})

describe.skipIf(!probe.ok)('a sandboxed stdio MCP server (real bwrap)', () => {
  let store: Store
  let server: TestServer
  let model: ScriptedModel
  let alice: TestUser
  let bundle: { dir: string; file: string }
  let dataDir: string
  let projectId: string
  const conversations: string[] = []
  const servers = (file: string, dir: string, dataDir: string): McpServerConfig[] => [
    {
      name: 'boxed',
      transport: 'stdio',
      sandbox: true,
      command: 'node',
      args: [file, 'stdio', 'boxed'],
      env: { TOY_FILES: '1' },
      mounts: [dir],
      risk: { default: 'low' },
      tools: { exclude: ['Bad Schema'] },
      maxProcesses: 2,
    },
    {
      name: 'brief',
      transport: 'stdio',
      sandbox: true,
      command: 'node',
      args: [file, 'stdio', 'brief'],
      env: { TOY_FILES: '1' },
      mounts: [dir],
      risk: { default: 'low' },
      tools: { exclude: ['Bad Schema'] },
      idleTimeoutMs: 300,
    },
    {
      name: 'broken',
      transport: 'stdio',
      sandbox: true,
      command: 'node',
      args: [file, 'stdio', 'broken'],
      mounts: ['/nonexistent/plinth-mcp-server'],
      startTimeoutMs: 2_000,
    },
    // Mounting what holds the data directory (and every conversation's directory) is refused.
    {
      name: 'nosy',
      transport: 'stdio',
      sandbox: true,
      command: 'node',
      args: [file, 'stdio', 'nosy'],
      mounts: [dirname(dataDir)],
      startTimeoutMs: 2_000,
    },
    {
      name: 'online',
      transport: 'stdio',
      sandbox: true,
      network: true,
      command: 'node',
      args: [file, 'stdio', 'online'],
      env: { TOY_FILES: '1' },
      mounts: [dir],
      risk: { default: 'low' },
      tools: { include: ['inspect'] },
    },
  ]

  beforeAll(async () => {
    bundle = await bundleToy()
    store = await openTestStore('pglite')
    model = new ScriptedModel({ id: 'scripted', turns: [] })
    dataDir = await mkdtemp(join(tmpdir(), 'plinth-boxed-data-'))
    // The sandbox user must reach the work directories below it (mkdtemp makes it 0700).
    await chmod(dataDir, 0o711)
    server = await startTestServer(store, {
      models: [model],
      dataDir,
      exec: { backend: 'sandbox' },
      mcpServers: servers(bundle.file, bundle.dir, dataDir),
    })
    alice = await server.createUser()
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'boxed' } })).body.id
    for (let index = 0; index < 3; index++)
      conversations.push(
        (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} }))
          .body.id,
      )
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
    if (bundle) await rm(bundle.dir, { recursive: true, force: true })
    if (dataDir) await rm(dataDir, { recursive: true, force: true })
  })

  const dispatch = (id: string, params: Record<string, unknown>, conversationId?: string) =>
    server.request('POST', `/api/commands/${id}`, {
      token: alice.token,
      body: { entrance: 'button', ...(conversationId && { conversationId }), params },
    })
  const files = async (conversationId: string) =>
    (
      (await server.request('GET', `/api/conversations/${conversationId}/files`, { token: alice.token })).body
        .items as Array<{ path: string }>
    ).map((entry) => entry.path)

  it('lists the tools through a process of its own; /readyz names only the server that cannot start', async () => {
    const ids = (
      (await server.request('GET', '/api/commands', { token: alice.token })).body.items as Array<{ id: string }>
    ).map((item) => item.id)
    expect(ids).toEqual(expect.arrayContaining(['mcp.boxed.write_file', 'mcp.boxed.inspect', 'mcp.boxed.echo']))
    expect(ids.filter((id) => id.startsWith('mcp.broken.'))).toEqual([])
    const ready = await server.request('GET', '/readyz')
    expect((ready.body.warnings as string[]).filter((warning) => warning.includes('MCP server')).sort()).toEqual([
      expect.stringMatching(
        /^MCP server broken is not available \(mount \/nonexistent\/plinth-mcp-server cannot be used \(no such file or directory\)\); its tools are not offered$/,
      ),
      expect.stringMatching(
        /^MCP server nosy is not available \(mount .* overlaps .* \(the work directories or the data directory\), which a sandboxed server must not see\); its tools are not offered$/,
      ),
    ])
    // The listing process runs as the sandbox user.
    expect(toyProcesses('boxed').length).toBe(1)
  })

  it('a call from conversation A writes into A’s work directory, and nowhere else', async () => {
    const [a, b] = conversations as [string, string]
    const answer = await dispatch('mcp.boxed.write_file', { name: 'from-tool.txt', text: 'written in A' }, a)
    expect(answer.status).toBe(200)
    expect(answer.body.result.structuredContent).toEqual({ cwd: '/work' })
    expect(await files(a)).toContain('from-tool.txt')
    expect(await files(b)).not.toContain('from-tool.txt')
    const download = await server.request('GET', `/api/conversations/${a}/files/from-tool.txt`, { token: alice.token })
    expect(download.body).toBe('written in A')
    // Exec in the same conversation sees it; the file belongs to the sandbox user.
    const seen = await server.exec.run({ conversationId: a, projectId: null, argv: ['cat', 'from-tool.txt'] })
    expect(seen.stdout).toBe('written in A')
    const owner = execFileSync('getent', ['passwd', sandboxUser], { encoding: 'utf8' }).split(':')[2]
    expect(String((await stat(join(server.dataDir, 'work', a, 'from-tool.txt'))).uid)).toBe(owner)
  })

  it('an agent run in conversation B calls the tool in B’s process', async () => {
    const b = conversations[1]!
    model.setTurns([
      {
        toolCalls: [
          { name: 'mcp__boxed__write_file', arguments: { name: 'from-run.txt', text: 'written by the agent' } },
        ],
      },
      { text: 'done' },
    ])
    const run = await server.request('POST', `/api/conversations/${b}/runs`, {
      token: alice.token,
      body: { input: 'write it', knowledge: { autoInject: false } },
    })
    expect(run.status).toBe(201)
    const finished = await until('the run to end', async () => {
      const current = (await server.request('GET', `/api/runs/${run.body.id}`, { token: alice.token })).body
      return ['completed', 'failed', 'requires_action'].includes(current.status) ? current : undefined
    })
    expect(finished.status).toBe('completed')
    expect(await files(b)).toContain('from-run.txt')
    expect(await files(conversations[0]!)).not.toContain('from-run.txt')
    const toolMessage = model.calls.at(-1)!.messages.find((message) => message.role === 'tool')!
    expect(String(toolMessage.content)).toContain('wrote from-run.txt')
  })

  it('the process sees only its work directory: not the data directory, the host home, the repository, another conversation; no network; not root', async () => {
    const [a, b] = conversations as [string, string]
    const port = Number(new URL(server.url).port)
    const paths = [
      server.dataDir,
      join(server.dataDir, 'work', b),
      homedir(),
      '/root',
      process.cwd(),
      '/work',
      bundle.file,
    ]
    const answer = await dispatch('mcp.boxed.inspect', { paths, host: '127.0.0.1', port }, a)
    expect(answer.status).toBe(200)
    const seen = answer.body.result.structuredContent as {
      cwd: string
      uid: number
      home: string
      readable: Record<string, boolean>
      connected: boolean | null
    }
    expect(seen.cwd).toBe('/work')
    // HOME is on the sandbox's own tmpfs: nothing the model writes into /work is read as the server's dotfiles.
    expect(seen.home).toBe('/tmp')
    expect(seen.uid).not.toBe(0)
    expect(seen.readable).toEqual({
      [server.dataDir]: false,
      [join(server.dataDir, 'work', b)]: false,
      [homedir()]: false,
      '/root': false,
      [process.cwd()]: process.cwd() === '/work',
      '/work': true,
      [bundle.file]: true,
    })
    // Plinth listens on loopback: a sandbox without network cannot reach it.
    expect(seen.connected).toBe(false)
  })

  it('network: true gives the process the host network', async () => {
    const port = Number(new URL(server.url).port)
    const answer = await dispatch('mcp.online.inspect', { host: '127.0.0.1', port }, conversations[0])
    expect(answer.body.result.structuredContent).toMatchObject({ cwd: '/work', connected: true })
  })

  it('a call without a conversation fails with conversation_required, before the gate, which the caller reads', async () => {
    const answer = await dispatch('mcp.boxed.echo', { text: 'nowhere' })
    expect(answer.body).toMatchObject({ code: 'command_error', commandCode: 'conversation_required' })
    // Refused by the bus before anyone could be asked to approve it, not by the server's process pool.
    expect(answer.body.detail).toMatch(/works in a conversation's work directory: dispatch it with a conversationId/)
  })

  it('keeps at most maxProcesses conversation processes, closing the least recently used', async () => {
    for (const conversationId of conversations)
      expect((await dispatch('mcp.boxed.echo', { text: 'hi' }, conversationId)).status).toBe(200)
    // The listing process and two conversation processes.
    await until('the least recently used process to be closed', () => toyProcesses('boxed').length === 3)
    // The first conversation's process was closed: calling it again starts a new one, and closes another.
    expect(
      (await dispatch('mcp.boxed.write_file', { name: 'again.txt', text: 'again' }, conversations[0])).status,
    ).toBe(200)
    expect(await files(conversations[0]!)).toContain('again.txt')
    await until('at most two conversation processes', () => toyProcesses('boxed').length === 3)
  })

  it('never closes a busy process for another: a call past maxProcesses, all busy, fails mcp_busy', async () => {
    const [a, b, c] = conversations as [string, string, string]
    const slow = [dispatch('mcp.boxed.slow', { ms: 10_000 }, a), dispatch('mcp.boxed.slow', { ms: 10_000 }, b)]
    // Once both calls are under way (until then C may still take an idle process), C is refused.
    let refused: { code?: string; commandCode?: string } = {}
    await until('a call in C refused while A and B are busy', async () => {
      refused = (await dispatch('mcp.boxed.echo', { text: 'x' }, c)).body
      return refused.commandCode === 'mcp_busy'
    })
    expect(refused).toMatchObject({ code: 'command_error', commandCode: 'mcp_busy' })
    // Neither busy call was cut short.
    for (const answer of await Promise.all(slow))
      expect(answer.body.result).toMatchObject({ content: [{ text: 'done' }] })
  })

  it('closes a process after idleTimeoutMs without a call', async () => {
    expect((await dispatch('mcp.brief.echo', { text: 'hi' }, conversations[2])).status).toBe(200)
    // Only the listing process stays.
    await until('the idle process to be closed', () => toyProcesses('brief').length === 1)
  })

  it('leaves no process and no scratch directory after shutdown', async () => {
    // A data directory of the test's own: it stays after the server closes, to be looked at.
    const dataDir = await mkdtemp(join(tmpdir(), 'plinth-mcp-shutdown-'))
    await chmod(dataDir, 0o711)
    const other = await startTestServer(store, {
      dataDir,
      exec: { backend: 'sandbox' },
      mcpServers: [
        {
          ...servers(bundle.file, bundle.dir, dataDir)[0]!,
          name: 'shortlived',
          args: [bundle.file, 'stdio', 'shortlived'],
        },
      ],
    })
    try {
      const user = await other.createUser()
      const project = (await other.request('POST', '/api/projects', { token: user.token, body: { name: 'p' } })).body.id
      const conversation = (
        await other.request('POST', `/api/projects/${project}/conversations`, { token: user.token, body: {} })
      ).body.id
      const answer = await other.request('POST', '/api/commands/mcp.shortlived.echo', {
        token: user.token,
        body: { entrance: 'button', conversationId: conversation, params: { text: 'x' } },
      })
      // The very first request of this server: the dispatch waits for the server's tools.
      expect(answer.status).toBe(200)
      expect(toyProcesses('shortlived').length).toBe(2)
      expect((await readdir(join(other.dataDir, 'work'))).filter((name) => name.startsWith('.scratch-')).length).toBe(1)
    } finally {
      await other.close()
    }
    try {
      expect(toyProcesses('shortlived')).toEqual([])
      // Nothing of it is left (bwrap included), once the kernel has reaped it.
      await until(
        'every sandboxed process to be gone',
        () => sandboxUserProcesses().filter((line) => line.includes('shortlived')).length === 0,
        5_000,
      )
      expect((await readdir(join(dataDir, 'work'))).filter((name) => name.startsWith('.scratch-'))).toEqual([])
    } finally {
      await rm(dataDir, { recursive: true, force: true })
    }
  })
})

describe.skipIf(!probe.ok)('a sandboxed stdio MCP server under the direct backend', () => {
  let store: Store
  let server: TestServer
  let bundle: { dir: string; file: string }
  let marker: string

  beforeAll(async () => {
    bundle = await bundleToy()
    marker = join(bundle.dir, 'started.log')
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      exec: { backend: 'direct' },
      // Were it started outside the sandbox, it would write TOY_LOG on the host.
      mcpServers: [
        {
          name: 'boxed',
          transport: 'stdio',
          sandbox: true,
          command: 'node',
          args: [bundle.file, 'stdio', 'direct-boxed'],
          env: { TOY_FILES: '1', TOY_LOG: marker },
          mounts: [bundle.dir],
        },
      ],
    })
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
    if (bundle) await rm(bundle.dir, { recursive: true, force: true })
  })

  it('is not started, its tools are not offered, and /readyz names it', async () => {
    const alice = await server.createUser()
    const ids = (
      (await server.request('GET', '/api/commands', { token: alice.token })).body.items as Array<{ id: string }>
    ).map((item) => item.id)
    expect(ids.filter((id) => id.startsWith('mcp.boxed.'))).toEqual([])
    const ready = await server.request('GET', '/readyz')
    expect(ready.status).toBe(200)
    expect(ready.body.warnings).toContain(
      'MCP server boxed runs only in the sandbox (sandbox: true), and the exec backend is direct: it is not started outside it and its tools are not offered',
    )
    expect(toyProcesses('direct-boxed')).toEqual([])
    await expect(stat(marker)).rejects.toThrow()
    expect(
      (
        await server.request('POST', '/api/commands/mcp.boxed.echo', {
          token: alice.token,
          body: { entrance: 'button', params: { text: 'x' } },
        })
      ).body.code,
    ).toBe('unknown_command')
  })
})
