import { spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { freePort } from './helpers/cli-process.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { testDb } from '../src/store/test-access.js'

// Per-user OAuth connections to an HTTP MCP server (docs/mcp.md, "Per-user connections"), against an
// authorization server built with the SDK's own server-side auth helpers (test/__fixtures__/mcp).
const toy = fileURLToPath(new URL('./__fixtures__/mcp/toy-server.mjs', import.meta.url))

async function until<T>(what: string, probe: () => Promise<T | undefined | false>, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await probe()
    if (value) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

describe('MCP client: per-user OAuth connections', () => {
  let store: Store
  let server: TestServer
  let alice: TestUser
  let bob: TestUser
  let oauth: ChildProcess
  let authBase: string
  let model: ScriptedModel

  beforeAll(async () => {
    const port = await freePort()
    authBase = `http://127.0.0.1:${port}`
    oauth = spawn(process.execPath, [toy, 'oauth', String(port)], { stdio: ['ignore', 'pipe', 'pipe'] })
    let seen = ''
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the OAuth fixture did not start: ${seen}`)), 60_000)
      const look = (chunk: Buffer) => {
        seen += chunk.toString('utf8')
        if (/listening/.test(seen)) {
          clearTimeout(timer)
          resolve()
        }
      }
      oauth.stdout?.on('data', look)
      oauth.stderr?.on('data', look)
    })
    store = await openTestStore('pglite')
    model = new ScriptedModel({ id: 'scripted', turns: [] })
    server = await startTestServer(store, {
      models: [model],
      secretKey: 'a-secret-key-for-the-oauth-test',
      mcpServers: [
        {
          name: 'acct',
          transport: 'http',
          url: `${authBase}/mcp`,
          auth: { type: 'oauth' },
          risk: { default: 'low', perTool: { 'delete-thing': 'high' } },
        },
      ],
    })
    alice = await server.createUser()
    bob = await server.createUser()
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
    oauth?.kill('SIGKILL')
  })

  const commandIds = async () =>
    ((await server.request('GET', '/api/commands', { token: alice.token })).body.items as Array<{ id: string }>).map(
      (item) => item.id,
    )
  const echo = (user: TestUser) =>
    server.request('POST', '/api/commands/mcp.acct.echo', {
      token: user.token,
      body: { entrance: 'button', params: { text: 'hi' } },
    })

  /** What the user does in a browser: opens the URL; the authorization server approves and sends them back. */
  async function authorize(user: TestUser): Promise<{ status: number; text: string }> {
    const started = await server.request('POST', '/api/mcp/connections/acct', { token: user.token })
    expect(started.status).toBe(200)
    expect(started.body.authorizationUrl.startsWith(`${authBase}/authorize?`)).toBe(true)
    const approval = await fetch(started.body.authorizationUrl, { redirect: 'manual' })
    expect(approval.status).toBe(302)
    const back = approval.headers.get('location')!
    expect(back.startsWith(`${server.url}/oauth/mcp/callback?`)).toBe(true)
    const callback = await fetch(back)
    return { status: callback.status, text: await callback.text() }
  }

  it('before anyone connects, the server offers no tools and /readyz says why', async () => {
    expect((await server.request('GET', '/api/mcp/connections', { token: alice.token })).body.items).toEqual([
      { server: 'acct', connected: false, pending: false },
    ])
    expect((await commandIds()).some((id) => id.startsWith('mcp.acct.'))).toBe(false)
    const warnings = (await server.request('GET', '/readyz')).body.warnings as string[]
    expect(warnings.find((warning) => warning.includes('MCP server acct'))).toMatch(/no user has connected it yet/)
  })

  it('a user connects once through the authorization server; the tools appear and run with their account', async () => {
    const callback = await authorize(alice)
    expect(callback.status).toBe(200)
    expect(callback.text).toContain('connected to acct')
    expect((await server.request('GET', '/api/mcp/connections', { token: alice.token })).body.items).toEqual([
      { server: 'acct', connected: true, pending: false },
    ])
    await until('mcp.acct.echo in the catalog', async () => (await commandIds()).includes('mcp.acct.echo'))
    const answer = await echo(alice)
    expect(answer.status).toBe(200)
    expect(answer.body.result.content[0].text).toBe('echo: hi')
    // Tokens are sealed at rest: nothing token-shaped is stored in the clear.
    const rows = await testDb(store).selectFrom('mcp_connections').select(['sealed']).execute()
    for (const row of rows) expect(row.sealed).not.toMatch(/access_token|refresh_token|code_verifier/)
    // A replayed callback is refused.
    const again = await fetch(`${server.url}/oauth/mcp/callback?state=nope&code=x`)
    expect(again.status).toBe(400)
    // A query string refused before the page (a NUL, a repeated field) is a problem document, not "[object Object]".
    for (const query of ['state=%00&code=x', 'state=a&code=b&state=c']) {
      const refused = await fetch(`${server.url}/oauth/mcp/callback?${query}`)
      expect(refused.status, query).toBe(400)
      expect(refused.headers.get('content-type'), query).toContain('application/problem+json')
      expect(await refused.json(), query).toMatchObject({ status: 400, code: 'validation_failed' })
    }
  })

  it('another user who has not connected gets mcp_connection_required, naming how to connect', async () => {
    const answer = await echo(bob)
    expect(answer.body).toMatchObject({ code: 'command_error', commandCode: 'mcp_connection_required' })
    expect(answer.body.detail).toContain('POST /api/mcp/connections/acct')
    expect((await server.request('GET', '/api/mcp/connections', { token: bob.token })).body.items).toEqual([
      { server: 'acct', connected: false, pending: false },
    ])
  })

  it('a run whose call needs the user’s connection waits (requires_action, kind connect) and goes on once they connect', async () => {
    const projectId = (await server.request('POST', '/api/projects', { token: bob.token, body: { name: 'oauth' } }))
      .body.id
    const conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: bob.token, body: {} })
    ).body.id
    model.setTurns([
      {
        toolCalls: [
          { name: 'mcp__acct__echo', arguments: { text: 'as bob' } },
          { name: 'mcp__acct__delete_thing', arguments: { name: 'z' } },
        ],
      },
      { text: 'done' },
    ])
    const run = (
      await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: bob.token,
        body: { input: 'go', knowledge: { autoInject: false } },
      })
    ).body
    const status = async () => (await server.request('GET', `/api/runs/${run.id}`, { token: bob.token })).body
    const waiting = await until('the run to wait', async () => {
      const current = await status()
      return ['requires_action', 'completed', 'failed'].includes(current.status) ? current : undefined
    })
    expect(waiting.status).toBe('requires_action')
    expect(waiting.requiredAction.decisions[0]).toMatchObject({
      commandId: 'mcp.acct.echo',
      kind: 'connect',
      connect: { server: 'acct', path: '/api/mcp/connections/acct' },
    })
    // A high-risk call stays an approval (told to connect first): connecting must not approve it.
    const risky = waiting.requiredAction.decisions[1]
    expect(risky).toMatchObject({ commandId: 'mcp.acct.delete_thing', kind: 'approve', risk: 'high' })
    const decision = (
      await server.request('GET', `/api/decisions/${waiting.requiredAction.decisions[0].decisionId}`, {
        token: bob.token,
      })
    ).body
    expect(decision).toMatchObject({ kind: 'connect', status: 'pending' })
    expect(decision.reasons[0]).toContain('POST /api/mcp/connections/acct')
    // Connecting approves the waiting call: the run goes on with bob's own account.
    expect((await authorize(bob)).status).toBe(200)
    await until(
      'the connect decision to be approved',
      async () =>
        (await server.request('GET', `/api/decisions/${decision.id}`, { token: bob.token })).body.status === 'approved',
    )
    expect((await server.request('GET', `/api/decisions/${risky.decisionId}`, { token: bob.token })).body.status).toBe(
      'pending',
    )
    expect(
      (
        await server.request('POST', `/api/decisions/${risky.decisionId}`, {
          token: bob.token,
          body: { decision: 'approve' },
        })
      ).status,
    ).toBe(200)
    const done = await until('the run to finish', async () => {
      const current = await status()
      return ['completed', 'failed'].includes(current.status) ? current : undefined
    })
    expect(done.status).toBe('completed')
    const messages = (
      await server.request('GET', `/api/conversations/${conversationId}/messages`, { token: bob.token })
    ).body.items as Array<{ role: string; content: unknown }>
    expect(JSON.stringify(messages)).toContain('echo: as bob')
  })

  it('revoked upstream: the call says to connect again; connecting again works; disconnecting forgets the tokens', async () => {
    await fetch(`${authBase}/revoke-all`, { method: 'POST' })
    const refused = await echo(alice)
    expect(refused.body, refused.body.detail).toMatchObject({
      code: 'command_error',
      commandCode: 'mcp_connection_required',
    })
    expect((await authorize(alice)).status).toBe(200)
    expect((await echo(alice)).status).toBe(200)
    expect((await server.request('DELETE', '/api/mcp/connections/acct', { token: alice.token })).status).toBe(204)
    expect((await server.request('GET', '/api/mcp/connections', { token: alice.token })).body.items).toEqual([
      { server: 'acct', connected: false, pending: false },
    ])
    expect((await echo(alice)).body).toMatchObject({ commandCode: 'mcp_connection_required' })
    expect((await server.request('DELETE', '/api/mcp/connections/acct', { token: alice.token })).status).toBe(404)
    expect((await server.request('POST', '/api/mcp/connections/nosuch', { token: alice.token })).status).toBe(404)
  })
})
