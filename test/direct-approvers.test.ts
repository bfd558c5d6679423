import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { sandboxAvailable } from './helpers/sandbox.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// Regression (docs/security.md#the-default-backend): under direct the person who approves an execution
// is the person who asked; an operator can require a second person.
describe('executions on the server itself approved by a designated approver', () => {
  let store: Store
  let server: TestServer
  let alice: TestUser
  let ops: TestUser
  let conversationId: string

  beforeAll(async () => {
    store = await openTestStore('pglite')
    // The approver is named before the user exists: names are resolved when a decision is made.
    server = await startTestServer(store, { exec: { backend: 'direct', directApprovers: ['ops-approver'] } })
    alice = await server.createUser()
    ops = await server.createUser('ops-approver')
    const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'p' } })).body
      .id
    conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  const exec = (command: string) =>
    server.request('POST', '/api/commands/core.exec', {
      token: alice.token,
      body: { entrance: 'button', conversationId, params: { command } },
    })

  it('the requester cannot approve; the approver sees it among their decisions and approves it; the requester may still reject', async () => {
    const asked = await exec('echo approved-by-ops')
    expect(asked.status).toBe(202)
    const self = await server.request('POST', `/api/decisions/${asked.body.decision.id}`, {
      token: alice.token,
      body: { decision: 'approve' },
    })
    expect([self.status, self.body.code]).toEqual([403, 'forbidden'])
    const session = await server.request('POST', `/api/decisions/${asked.body.decision.id}`, {
      token: alice.token,
      body: { decision: 'approve_session' },
    })
    expect(session.status).toBe(403)
    const pending = await server.request('GET', '/api/decisions?status=pending', { token: ops.token })
    expect(pending.body.items.map((item: { id: string }) => item.id)).toContain(asked.body.decision.id)
    const approved = await server.request('POST', `/api/decisions/${asked.body.decision.id}`, {
      token: ops.token,
      body: { decision: 'approve' },
    })
    expect(approved.status).toBe(200)
    expect(approved.body.dispatch).toMatchObject({ status: 'succeeded', result: { stdout: 'approved-by-ops\n' } })

    const second = await exec('echo never')
    const rejected = await server.request('POST', `/api/decisions/${second.body.decision.id}`, {
      token: alice.token,
      body: { decision: 'reject' },
    })
    expect([rejected.status, rejected.body.decision.status]).toEqual([200, 'rejected'])
    // Someone else entirely still sees nothing.
    const stranger = await server.createUser()
    expect(
      (await server.request('GET', '/api/decisions?status=pending', { token: stranger.token })).body.items,
    ).toEqual([])
  })

  it('an approver asking for their own execution needs another approver', async () => {
    const projectId = (await server.request('POST', '/api/projects', { token: ops.token, body: { name: 'ops' } })).body
      .id
    const conversation = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: ops.token, body: {} })
    ).body.id
    const asked = await server.request('POST', '/api/commands/core.exec', {
      token: ops.token,
      body: { entrance: 'button', conversationId: conversation, params: { command: 'id' } },
    })
    expect(asked.status).toBe(202)
    const self = await server.request('POST', `/api/decisions/${asked.body.decision.id}`, {
      token: ops.token,
      body: { decision: 'approve' },
    })
    expect(self.status).toBe(403)
  })
})

// A decision asked under the sandbox and still pending when the operator switches to direct is answered
// under today's rules: only a designated approver may let it run on the server itself.
const probe = await sandboxAvailable('designated approvers after a switch to direct')
describe.skipIf(!probe.ok)('a sandbox-time decision after a switch to direct', () => {
  let store: Store
  let server: TestServer
  const adminToken = 'admin-token-0123456789abcdef'

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      adminToken,
      exec: { backend: 'sandbox', directApprovers: ['ops-switch'] },
    })
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('the requester can no longer approve it; the designated approver can', async () => {
    const alice = await server.createUser()
    const ops = await server.createUser('ops-switch')
    const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'p' } })).body
      .id
    const conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    const asked = await server.request('POST', '/api/commands/core.exec', {
      token: alice.token,
      body: { entrance: 'button', conversationId, params: { command: 'echo switched' } },
    })
    expect(asked.status, JSON.stringify(asked.body)).toBe(202)
    const switched = await server.request('PATCH', '/api/admin/settings', {
      token: adminToken,
      body: { execBackend: 'direct' },
    })
    expect(switched.status).toBe(200)
    const self = await server.request('POST', `/api/decisions/${asked.body.decision.id}`, {
      token: alice.token,
      body: { decision: 'approve' },
    })
    expect([self.status, self.body.code]).toEqual([403, 'forbidden'])
    // The designated approver finds it among what waits for them.
    const waiting = await server.request('GET', '/api/decisions?status=pending', { token: ops.token })
    expect(waiting.body.items.map((item: { id: string }) => item.id)).toContain(asked.body.decision.id)
    const approved = await server.request('POST', `/api/decisions/${asked.body.decision.id}`, {
      token: ops.token,
      body: { decision: 'approve' },
    })
    expect(approved.status, JSON.stringify(approved.body)).toBe(200)
    expect(approved.body.dispatch).toMatchObject({ status: 'succeeded', result: { stdout: 'switched\n' } })
  })
})
