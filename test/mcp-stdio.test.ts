import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { ElicitRequestSchema, type ElicitRequest } from '@modelcontextprotocol/sdk/types.js'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { cliEnv, plinthBin, runPlinth } from './helpers/cli-process.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { testDb } from '../src/store/test-access.js'

// `plinth mcp`: the stdio MCP server desktop clients start, forwarding to a running server's /mcp.
// Driven here by the MCP Inspector's CLI (as a user would check it) and by the SDK's stdio client.
const inspectorCli = fileURLToPath(
  new URL('../node_modules/@modelcontextprotocol/inspector/cli/build/cli.js', import.meta.url),
)

/** Runs the Inspector CLI against the `plinth` server of a client config file (the Claude Desktop shape). */
async function inspect(
  cwd: string,
  configFile: string,
  args: string[],
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(
    process.execPath,
    [inspectorCli, '--cli', '--config', configFile, '--server', 'plinth', ...args],
    { cwd, env: cliEnv(), stdio: ['ignore', 'pipe', 'pipe'] },
  )
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  const timer = setTimeout(() => child.kill('SIGKILL'), 120_000)
  try {
    const [code] = (await once(child, 'close')) as [number | null]
    return { code, stdout, stderr }
  } finally {
    clearTimeout(timer)
  }
}

describe('plinth mcp (stdio)', () => {
  let store: Store
  let server: TestServer
  let user: TestUser
  let cwd: string
  let projectId: string

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { plugins: ['rdm'] })
    user = await server.createUser()
    projectId = (
      await server.request('POST', '/api/projects', { token: user.token, body: { name: 'stdio', tools: ['rdm.ping'] } })
    ).body.id
    cwd = await mkdtemp(join(tmpdir(), 'plinth-mcp-stdio-'))
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
    if (cwd) await rm(cwd, { recursive: true, force: true })
  })

  it(
    'the MCP Inspector CLI lists and calls tools through it (token from PLINTH_TOKEN)',
    { timeout: 240_000 },
    async () => {
      const configFile = join(cwd, 'mcp.json')
      await writeFile(
        configFile,
        JSON.stringify({
          mcpServers: {
            plinth: {
              command: process.execPath,
              args: [plinthBin, 'mcp', '--url', server.url],
              env: { PLINTH_TOKEN: user.token },
            },
          },
        }),
      )
      const listed = await inspect(cwd, configFile, ['--method', 'tools/list'])
      expect(listed.code, listed.stderr).toBe(0)
      const tools = (JSON.parse(listed.stdout) as { tools: Array<{ name: string }> }).tools.map((tool) => tool.name)
      expect(tools).toEqual(expect.arrayContaining(['rdm__ping', 'rdm__draft__compose']))

      const called = await inspect(cwd, configFile, [
        '--method',
        'tools/call',
        '--tool-name',
        'rdm__ping',
        '--tool-arg',
        'target=inspector',
      ])
      expect(called.code, called.stderr).toBe(0)
      expect(JSON.parse(called.stdout)).toMatchObject({ structuredContent: { pong: true, target: 'inspector' } })
      const audit = await server.request('GET', '/api/audit?commandId=rdm.ping&entrance=mcp', { token: user.token })
      expect(audit.body.items.some((item: { params: { target?: string } }) => item.params.target === 'inspector')).toBe(
        true,
      )
    },
  )

  it('with --token and --project: that project’s tools only', { timeout: 120_000 }, async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [plinthBin, 'mcp', '--token', user.token, '--url', `${server.url}/`, '--project', projectId],
      env: cliEnv() as Record<string, string>,
      stderr: 'pipe',
    })
    const client = new Client({ name: 'stdio-test', version: '1.0.0' })
    await client.connect(transport)
    try {
      expect((await client.listTools()).tools.map((tool) => tool.name)).toEqual(['rdm__ping'])
      const result = await client.callTool({ name: 'rdm__ping', arguments: { target: 'stdio' } })
      expect(result.structuredContent).toMatchObject({ pong: true, target: 'stdio' })
    } finally {
      await client.close()
    }
  })

  it('a desktop client that answers elicitations approves a call through it', { timeout: 120_000 }, async () => {
    const project = (
      await server.request('POST', '/api/projects', { token: user.token, body: { name: 'stdio-asked' } })
    ).body.id as string
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [plinthBin, 'mcp', '--token', user.token, '--url', server.url, '--project', project],
      env: cliEnv() as Record<string, string>,
      stderr: 'pipe',
    })
    const client = new Client({ name: 'stdio-asking', version: '1.0.0' }, { capabilities: { elicitation: {} } })
    const asked: ElicitRequest[] = []
    client.setRequestHandler(ElicitRequestSchema, (request) => {
      asked.push(request)
      return { action: 'accept', content: { decision: 'approve' } }
    })
    await client.connect(transport)
    try {
      const result = await client.callTool({
        name: 'rdm__draft__compose',
        arguments: { title: 'Over stdio', body: 'asked in the desktop client' },
      })
      expect(result.structuredContent).toMatchObject({ title: 'Over stdio', projectId: project })
      expect(asked).toHaveLength(1)
      expect(asked[0]!.params.message).toContain('rdm.draft.compose')
    } finally {
      await client.close()
    }
  })

  it('renews a session the server has forgotten, without the client noticing', { timeout: 120_000 }, async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [plinthBin, 'mcp', '--token', user.token, '--url', server.url],
      env: cliEnv() as Record<string, string>,
      stderr: 'pipe',
    })
    const client = new Client({ name: 'stdio-renew', version: '1.0.0' })
    await client.connect(transport)
    try {
      expect((await client.listTools()).tools.length).toBeGreaterThan(0)
      // As after a day idle: every session is gone.
      await testDb(store).deleteFrom('mcp_sessions').execute()
      const pinged = await client.callTool({ name: 'rdm__ping', arguments: { target: 'renewed' } })
      expect(pinged.structuredContent).toMatchObject({ pong: true, target: 'renewed' })
    } finally {
      await client.close()
    }
  })

  it(
    'answers what it was sent, then exits 0 once stdin closes; stdout holds JSON-RPC only',
    { timeout: 120_000 },
    async () => {
      const child = spawn(process.execPath, [plinthBin, 'mcp', '--url', server.url], {
        cwd,
        env: cliEnv({ PLINTH_TOKEN: user.token }),
        stdio: ['pipe', 'pipe', 'pipe'],
      })
      let stdout = ''
      let stderr = ''
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
      const exited = once(child, 'close') as Promise<[number | null, NodeJS.Signals | null]>
      const initialize = {
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
      }
      child.stdin.write(`${JSON.stringify(initialize)}\n`)
      child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' })}\n`)
      child.stdin.write(
        `${JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'rdm__ping', arguments: { target: 'raw' } } })}\n`,
      )
      // Closed at once: the calls under way are still answered before it exits.
      child.stdin.end()
      const timer = setTimeout(() => child.kill('SIGKILL'), 110_000)
      const [code] = await exited
      clearTimeout(timer)
      expect(code, stderr).toBe(0)
      const messages = stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { id?: number; result?: Record<string, unknown> })
      expect(messages.map((message) => message.id).sort()).toEqual([1, 2])
      expect(messages.find((message) => message.id === 1)!.result).toMatchObject({ serverInfo: { name: 'plinth' } })
      expect(messages.find((message) => message.id === 2)!.result).toMatchObject({
        structuredContent: { pong: true, target: 'raw' },
      })
    },
  )

  it(
    'a refused token answers the client’s request with an error naming the 401, not silence',
    { timeout: 120_000 },
    async () => {
      const transport = new StdioClientTransport({
        command: process.execPath,
        args: [plinthBin, 'mcp', '--url', server.url],
        env: cliEnv({ PLINTH_TOKEN: 'not-a-token' }) as Record<string, string>,
        stderr: 'pipe',
      })
      const client = new Client({ name: 'stdio-test', version: '1.0.0' })
      await expect(client.connect(transport)).rejects.toThrow(/401/)
      await client.close()
    },
  )

  it('without a token it says how to get one (exit 2), and the help lists it', async () => {
    const missing = await runPlinth(['mcp', '--url', server.url], { cwd })
    expect(missing.code).toBe(2)
    expect(missing.stderr).toContain('plinth mcp needs a token')
    expect(missing.stdout).toBe('')
    const help = await runPlinth(['help'], { cwd })
    expect(help.stdout).toContain('plinth mcp [--url U] [--token T] [--project ID]')
  })
})
