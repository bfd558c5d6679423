import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { kvSet, type Store } from '../src/store/index.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

interface Fixture {
  projectId: string
  conversationId: string
  decisionId: string
  runId: string
  /** A draft knowledge item of the owner's. */
  knowledgeId: string
  /** A webhook of the project, and the message it got for the knowledge item's ingestion. */
  webhookId: string
  deliveryId: string
  /** A paused schedule of the project's. */
  scheduleId: string
  /** A memory of the project's (members read and write it). */
  memoryId: string
}

interface RouteCase {
  method: string
  /** OpenAPI-style path, as listed in /docs/json. */
  path: string
  url: (fixture: Fixture) => string
  body?: unknown
  /** Status for the owner. */
  owner: number
  /** Status for a member of the shared project (through the rdm ProjectAuthz adapter). */
  member: number
  /** Status for another user (and for a member whose membership was revoked): 404 for someone else's
   *  resource; collection routes answer the caller's own view. */
  stranger: number
  stream?: boolean
}

const routes: RouteCase[] = [
  { method: 'GET', path: '/api/me', url: () => '/api/me', owner: 200, member: 200, stranger: 200 },
  // Issuing a ticket grants nothing: the stream it opens checks access as with the header (stream-tickets.test).
  {
    method: 'POST',
    path: '/api/stream-tickets',
    url: () => '/api/stream-tickets',
    body: 'ticket',
    owner: 201,
    member: 201,
    stranger: 201,
  },
  { method: 'GET', path: '/api/projects', url: () => '/api/projects', owner: 200, member: 200, stranger: 200 },
  {
    method: 'POST',
    path: '/api/projects',
    url: () => '/api/projects',
    body: { name: 'n' },
    owner: 201,
    member: 201,
    stranger: 201,
  },
  {
    method: 'GET',
    path: '/api/projects/{id}',
    url: (f) => `/api/projects/${f.projectId}`,
    owner: 200,
    member: 200,
    stranger: 404,
  },
  {
    method: 'PATCH',
    path: '/api/projects/{id}',
    url: (f) => `/api/projects/${f.projectId}`,
    body: { name: 'x' },
    owner: 200,
    member: 200,
    stranger: 404,
  },
  {
    method: 'DELETE',
    path: '/api/projects/{id}',
    url: (f) => `/api/projects/${f.projectId}`,
    owner: 204,
    member: 403,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/projects/{id}/conversations',
    url: (f) => `/api/projects/${f.projectId}/conversations`,
    body: {},
    owner: 201,
    member: 201,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/projects/{id}/conversations',
    url: (f) => `/api/projects/${f.projectId}/conversations`,
    owner: 200,
    member: 200,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/projects/{id}/events',
    url: (f) => `/api/projects/${f.projectId}/events`,
    owner: 200,
    member: 200,
    stranger: 404,
    stream: true,
  },
  {
    method: 'GET',
    path: '/api/conversations/{id}',
    url: (f) => `/api/conversations/${f.conversationId}`,
    owner: 200,
    member: 404,
    stranger: 404,
  },
  {
    method: 'PATCH',
    path: '/api/conversations/{id}',
    url: (f) => `/api/conversations/${f.conversationId}`,
    body: { title: 't' },
    owner: 200,
    member: 404,
    stranger: 404,
  },
  {
    method: 'DELETE',
    path: '/api/conversations/{id}',
    url: (f) => `/api/conversations/${f.conversationId}`,
    owner: 204,
    member: 404,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/conversations/{id}/messages',
    url: (f) => `/api/conversations/${f.conversationId}/messages`,
    owner: 200,
    member: 404,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/conversations/{id}/events',
    url: (f) => `/api/conversations/${f.conversationId}/events`,
    owner: 200,
    member: 404,
    stranger: 404,
    stream: true,
  },

  { method: 'GET', path: '/api/commands', url: () => '/api/commands', owner: 200, member: 200, stranger: 200 },
  // Per-user MCP connections are the caller's own; no OAuth MCP server is configured here.
  {
    method: 'GET',
    path: '/api/mcp/connections',
    url: () => '/api/mcp/connections',
    owner: 200,
    member: 200,
    stranger: 200,
  },
  {
    method: 'POST',
    path: '/api/mcp/connections/{server}',
    url: () => '/api/mcp/connections/acct',
    owner: 404,
    member: 404,
    stranger: 404,
  },
  {
    method: 'DELETE',
    path: '/api/mcp/connections/{server}',
    url: () => '/api/mcp/connections/acct',
    owner: 404,
    member: 404,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/commands/{commandId}',
    url: () => '/api/commands/rdm.ping',
    body: 'ping',
    owner: 200,
    member: 200,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/decisions',
    url: () => '/api/decisions?status=pending',
    owner: 200,
    member: 200,
    stranger: 200,
  },
  {
    method: 'GET',
    path: '/api/decisions/{id}',
    url: (f) => `/api/decisions/${f.decisionId}`,
    owner: 200,
    member: 404,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/decisions/{id}',
    url: (f) => `/api/decisions/${f.decisionId}`,
    body: { decision: 'reject' },
    owner: 200,
    member: 404,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/decisions',
    url: () => '/api/decisions',
    body: 'batch',
    owner: 200,
    member: 200,
    stranger: 200,
  },
  { method: 'GET', path: '/api/audit', url: () => '/api/audit', owner: 200, member: 200, stranger: 200 },
  { method: 'GET', path: '/api/usage', url: () => '/api/usage', owner: 200, member: 200, stranger: 200 },
  { method: 'GET', path: '/api/models', url: () => '/api/models', owner: 200, member: 200, stranger: 200 },
  {
    method: 'POST',
    path: '/api/conversations/{id}/runs',
    url: (f) => `/api/conversations/${f.conversationId}/runs`,
    body: { input: 'hi' },
    owner: 201,
    member: 404,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/conversations/{id}/ag-ui',
    url: (f) => `/api/conversations/${f.conversationId}/ag-ui`,
    body: 'ag-ui',
    owner: 200,
    member: 404,
    stranger: 404,
    stream: true,
  },
  {
    method: 'POST',
    path: '/api/conversations/{id}/ui-stream',
    url: (f) => `/api/conversations/${f.conversationId}/ui-stream`,
    body: 'ui-stream',
    owner: 200,
    member: 404,
    stranger: 404,
    stream: true,
  },
  {
    method: 'GET',
    path: '/api/conversations/{id}/ui-stream',
    url: (f) => `/api/conversations/${f.conversationId}/ui-stream`,
    owner: 204,
    member: 404,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/conversations/{id}/runs',
    url: (f) => `/api/conversations/${f.conversationId}/runs`,
    owner: 200,
    member: 404,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/conversations',
    url: () => '/api/conversations',
    owner: 200,
    member: 200,
    stranger: 200,
  },
  {
    method: 'GET',
    path: '/api/runs',
    url: () => '/api/runs?status=requires_action',
    owner: 200,
    member: 200,
    stranger: 200,
  },
  { method: 'GET', path: '/api/runs/{id}', url: (f) => `/api/runs/${f.runId}`, owner: 200, member: 404, stranger: 404 },
  {
    method: 'POST',
    path: '/api/runs/{id}/resume',
    url: (f) => `/api/runs/${f.runId}/resume`,
    owner: 409,
    member: 404,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/runs/{id}/cancel',
    url: (f) => `/api/runs/${f.runId}/cancel`,
    owner: 200,
    member: 404,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/runs/{id}/tool-outputs',
    url: (f) => `/api/runs/${f.runId}/tool-outputs`,
    body: { outputs: [{ callId: '01ARZ3NDEKTSV4RRFFQ69G5FAV', output: {} }] },
    owner: 409,
    member: 404,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/runs/{id}/events',
    url: (f) => `/api/runs/${f.runId}/events`,
    owner: 200,
    member: 404,
    stranger: 404,
    stream: true,
  },

  {
    method: 'POST',
    path: '/api/projects/{id}/knowledge',
    url: (f) => `/api/projects/${f.projectId}/knowledge`,
    body: { title: 't', text: 'some text' },
    owner: 201,
    member: 201,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/projects/{id}/knowledge',
    url: (f) => `/api/projects/${f.projectId}/knowledge`,
    owner: 200,
    member: 200,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/knowledge/{id}',
    url: (f) => `/api/knowledge/${f.knowledgeId}`,
    owner: 200,
    member: 404,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/knowledge/{id}/chunks',
    url: (f) => `/api/knowledge/${f.knowledgeId}/chunks`,
    owner: 200,
    member: 404,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/knowledge/{id}/publish',
    url: (f) => `/api/knowledge/${f.knowledgeId}/publish`,
    owner: 200,
    member: 404,
    stranger: 404,
  },
  {
    method: 'DELETE',
    path: '/api/knowledge/{id}',
    url: (f) => `/api/knowledge/${f.knowledgeId}`,
    owner: 204,
    member: 404,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/conversations/{id}/compact',
    url: (f) => `/api/conversations/${f.conversationId}/compact`,
    owner: 409,
    member: 404,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/conversations/{id}/compactions',
    url: (f) => `/api/conversations/${f.conversationId}/compactions`,
    owner: 200,
    member: 404,
    stranger: 404,
  },
  { method: 'GET', path: '/api/memories', url: () => '/api/memories', owner: 200, member: 200, stranger: 200 },
  {
    method: 'POST',
    path: '/api/memories',
    url: () => '/api/memories',
    body: { text: 'a fact of my own' },
    owner: 201,
    member: 201,
    stranger: 201,
  },
  {
    method: 'GET',
    path: '/api/memories/{id}',
    url: (f) => `/api/memories/${f.memoryId}`,
    owner: 200,
    member: 200,
    stranger: 404,
  },
  {
    method: 'PATCH',
    path: '/api/memories/{id}',
    url: (f) => `/api/memories/${f.memoryId}`,
    body: { text: 'changed' },
    owner: 200,
    member: 200,
    stranger: 404,
  },
  {
    method: 'DELETE',
    path: '/api/memories/{id}',
    url: (f) => `/api/memories/${f.memoryId}`,
    owner: 204,
    member: 204,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/projects/{id}/search',
    url: (f) => `/api/projects/${f.projectId}/search?q=text`,
    owner: 200,
    member: 200,
    stranger: 404,
  },
  { method: 'GET', path: '/api/search', url: () => '/api/search?q=text', owner: 200, member: 200, stranger: 200 },

  // Schedules: whoever may edit the project creates them (the rdm adapter lets members write); a schedule
  // runs as its creator, so only they change it or fire it by hand — others may pause or delete it.
  {
    method: 'POST',
    path: '/api/projects/{id}/schedules',
    url: (f) => `/api/projects/${f.projectId}/schedules`,
    body: { every: '1h', enabled: false, target: { kind: 'run', input: 'x' } },
    owner: 201,
    member: 201,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/projects/{id}/schedules',
    url: (f) => `/api/projects/${f.projectId}/schedules`,
    owner: 200,
    member: 200,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/schedules/{id}',
    url: (f) => `/api/schedules/${f.scheduleId}`,
    owner: 200,
    member: 200,
    stranger: 404,
  },
  {
    method: 'PATCH',
    path: '/api/schedules/{id}',
    url: (f) => `/api/schedules/${f.scheduleId}`,
    body: { name: 'renamed' },
    owner: 200,
    member: 403,
    stranger: 404,
  },
  {
    method: 'DELETE',
    path: '/api/schedules/{id}',
    url: (f) => `/api/schedules/${f.scheduleId}`,
    owner: 204,
    member: 204,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/schedules/{id}/run-now',
    url: (f) => `/api/schedules/${f.scheduleId}/run-now`,
    owner: 201,
    member: 403,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/schedules/{id}/firings',
    url: (f) => `/api/schedules/${f.scheduleId}/firings`,
    owner: 200,
    member: 200,
    stranger: 404,
  },

  // Webhooks are the project owner's alone: a member is refused (403), like deleting the project.
  {
    method: 'POST',
    path: '/api/projects/{id}/webhooks',
    url: (f) => `/api/projects/${f.projectId}/webhooks`,
    body: { url: 'https://example.com/hook', events: ['run.completed'] },
    owner: 201,
    member: 403,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/projects/{id}/webhooks',
    url: (f) => `/api/projects/${f.projectId}/webhooks`,
    owner: 200,
    member: 403,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/projects/{id}/webhooks/{webhookId}',
    url: (f) => `/api/projects/${f.projectId}/webhooks/${f.webhookId}`,
    owner: 200,
    member: 403,
    stranger: 404,
  },
  {
    method: 'PATCH',
    path: '/api/projects/{id}/webhooks/{webhookId}',
    url: (f) => `/api/projects/${f.projectId}/webhooks/${f.webhookId}`,
    body: { description: 'x' },
    owner: 200,
    member: 403,
    stranger: 404,
  },
  {
    method: 'DELETE',
    path: '/api/projects/{id}/webhooks/{webhookId}',
    url: (f) => `/api/projects/${f.projectId}/webhooks/${f.webhookId}`,
    owner: 204,
    member: 403,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/projects/{id}/webhooks/{webhookId}/rotate-secret',
    url: (f) => `/api/projects/${f.projectId}/webhooks/${f.webhookId}/rotate-secret`,
    owner: 200,
    member: 403,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/projects/{id}/webhooks/{webhookId}/deliveries',
    url: (f) => `/api/projects/${f.projectId}/webhooks/${f.webhookId}/deliveries`,
    owner: 200,
    member: 403,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/projects/{id}/webhooks/{webhookId}/deliveries/{deliveryId}',
    url: (f) => `/api/projects/${f.projectId}/webhooks/${f.webhookId}/deliveries/${f.deliveryId}`,
    owner: 200,
    member: 403,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/projects/{id}/webhooks/{webhookId}/deliveries/{deliveryId}/redeliver',
    url: (f) => `/api/projects/${f.projectId}/webhooks/${f.webhookId}/deliveries/${f.deliveryId}/redeliver`,
    owner: 202,
    member: 403,
    stranger: 404,
  },

  {
    method: 'GET',
    path: '/api/conversations/{id}/files',
    url: (f) => `/api/conversations/${f.conversationId}/files`,
    owner: 200,
    member: 404,
    stranger: 404,
  },
  {
    method: 'GET',
    path: '/api/conversations/{id}/files/{*}',
    url: (f) => `/api/conversations/${f.conversationId}/files/notes.md`,
    owner: 200,
    member: 404,
    stranger: 404,
  },
  {
    method: 'PUT',
    path: '/api/conversations/{id}/files/{*}',
    url: (f) => `/api/conversations/${f.conversationId}/files/new.md`,
    body: 'bytes',
    owner: 201,
    member: 404,
    stranger: 404,
  },
  {
    method: 'DELETE',
    path: '/api/conversations/{id}/files/{*}',
    url: (f) => `/api/conversations/${f.conversationId}/files/old.md`,
    owner: 204,
    member: 404,
    stranger: 404,
  },
  {
    method: 'POST',
    path: '/api/conversations/{id}/files/register',
    url: (f) => `/api/conversations/${f.conversationId}/files/register`,
    body: { path: 'notes.md' },
    owner: 202,
    member: 404,
    stranger: 404,
  },
]

// On the embedded database too, always (CI's other API tests use Postgres): every route once on
// PGlite's single session, where a read through the store inside a route's transaction waits for ever.
for (const engine of new Set(['pglite' as const, ...apiEngines()])) {
  describe(`authorization matrix on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let owner: TestUser
    let member: TestUser
    let revokedMember: TestUser
    let stranger: TestUser
    let revoked: TestUser

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { plugins: ['rdm'] })
      owner = await server.createUser()
      member = await server.createUser()
      revokedMember = await server.createUser()
      stranger = await server.createUser()
      revoked = await server.createUser()
      await server.revoke(revoked)
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    async function fixture(): Promise<Fixture> {
      const project = await server.request('POST', '/api/projects', { token: owner.token, body: { name: 'matrix' } })
      const conversation = await server.request('POST', `/api/projects/${project.body.id}/conversations`, {
        token: owner.token,
        body: {},
      })
      // The member is listed; the revoked member was listed and removed again.
      await kvSet(store, 'rdm', `members:${project.body.id}`, [revokedMember.user.id, member.user.id])
      await kvSet(store, 'rdm', `members:${project.body.id}`, [member.user.id])
      const pending = await server.request('POST', '/api/commands/rdm.draft.compose', {
        token: owner.token,
        body: { entrance: 'card', conversationId: conversation.body.id, params: { title: 't', body: 'b' } },
      })
      const other = await server.request('POST', `/api/projects/${project.body.id}/conversations`, {
        token: owner.token,
        body: {},
      })
      const run = await server.request('POST', `/api/conversations/${other.body.id}/runs`, {
        token: owner.token,
        body: { input: 'hello' },
      })
      const webhook = await server.request('POST', `/api/projects/${project.body.id}/webhooks`, {
        token: owner.token,
        body: { url: 'https://example.com/hook', events: ['knowledge.ingested'] },
      })
      // Small text is ingested within the request: its outbox message is committed with it.
      const knowledge = await server.request('POST', `/api/projects/${project.body.id}/knowledge`, {
        token: owner.token,
        body: { title: 'draft', text: 'draft text' },
      })
      const deliveries = await server.request(
        'GET',
        `/api/projects/${project.body.id}/webhooks/${webhook.body.id}/deliveries`,
        { token: owner.token },
      )
      const schedule = await server.request('POST', `/api/projects/${project.body.id}/schedules`, {
        token: owner.token,
        body: { every: '1h', enabled: false, target: { kind: 'run', input: 'scheduled' } },
      })
      const memory = await server.request('POST', '/api/memories', {
        token: owner.token,
        body: { projectId: project.body.id, text: 'the project deploys on Thursdays' },
      })
      await server.exec.workdirs.write(conversation.body.id, 'notes.md', '# Notes')
      await server.exec.workdirs.write(conversation.body.id, 'old.md', '# Old')
      return {
        projectId: project.body.id,
        conversationId: conversation.body.id,
        decisionId: pending.body.decision.id,
        runId: run.body.id,
        knowledgeId: knowledge.body.id,
        webhookId: webhook.body.id,
        deliveryId: deliveries.body.items[0].id,
        scheduleId: schedule.body.id,
        memoryId: memory.body.id,
      }
    }

    async function call(
      route: RouteCase,
      fixtureValue: Fixture,
      token: string | undefined,
    ): Promise<{ status: number; code?: string; type: string | null }> {
      const headers: Record<string, string> = {}
      if (token) headers.authorization = `Bearer ${token}`
      if (route.body !== undefined)
        headers['content-type'] = route.body === 'bytes' ? 'application/octet-stream' : 'application/json'
      const body =
        route.body === 'bytes'
          ? '# uploaded'
          : route.body === 'ping'
            ? { entrance: 'button', projectId: fixtureValue.projectId, params: {} }
            : route.body === 'batch'
              ? { items: [{ id: fixtureValue.decisionId, decision: 'reject' }] }
              : route.body === 'ticket'
                ? { path: `/api/projects/${fixtureValue.projectId}/events` }
                : route.body === 'ui-stream'
                  ? { messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'hi' }] }] }
                  : route.body === 'ag-ui'
                    ? {
                        threadId: fixtureValue.conversationId,
                        runId: 'r1',
                        messages: [{ id: 'u1', role: 'user', content: 'hi' }],
                      }
                    : route.body
      const controller = new AbortController()
      const response = await fetch(server.url + route.url(fixtureValue), {
        method: route.method,
        headers,
        body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
        signal: controller.signal,
      })
      const type = response.headers.get('content-type')
      if (route.stream && response.status === 200) {
        controller.abort()
        return { status: 200, type }
      }
      const text = await response.text()
      const code = type?.includes('problem+json') ? (JSON.parse(text) as { code: string }).code : undefined
      return { status: response.status, code, type }
    }

    it('covers every /api route the server documents', async () => {
      const openapi = await server.request('GET', '/docs/json')
      const documented = Object.entries(openapi.body.paths as Record<string, Record<string, unknown>>)
        .filter(([path]) => path.startsWith('/api/') && !path.startsWith('/api/admin/'))
        .flatMap(([path, methods]) =>
          Object.keys(methods)
            .filter((method) => method !== 'head')
            .map((method) => `${method.toUpperCase()} ${path}`),
        )
      expect(routes.map((route) => `${route.method} ${route.path}`).sort()).toEqual(documented.sort())
    })

    for (const route of routes) {
      it(`${route.method} ${route.path}: owner ${route.owner}, member ${route.member}, revoked member and stranger ${route.stranger}, no token 401, revoked token 401`, async () => {
        // Outsiders cannot touch the fixture's resources (their successes act on their own), so they share
        // one fixture; the member and the owner get their own unless the route only reads or refuses them.
        const shared = await fixture()
        const reads = route.method === 'GET'
        const forStranger = await call(route, shared, stranger.token)
        expect(forStranger.status).toBe(route.stranger)
        if (route.stranger === 404) expect(forStranger.code).toBe('not_found')
        const forRevokedMember = await call(route, shared, revokedMember.token)
        expect(forRevokedMember.status).toBe(route.stranger)
        const anonymous = await call(route, shared, undefined)
        expect(anonymous).toMatchObject({ status: 401, code: 'unauthorized' })
        const withRevoked = await call(route, shared, revoked.token)
        expect(withRevoked).toMatchObject({ status: 401, code: 'unauthorized' })
        const withGarbage = await call(route, shared, 'plt_not-a-real-token')
        expect(withGarbage).toMatchObject({ status: 401, code: 'unauthorized' })
        const forMember = await call(route, reads || route.member >= 400 ? shared : await fixture(), member.token)
        expect(forMember.status).toBe(route.member)
        const forOwner = await call(route, reads ? shared : await fixture(), owner.token)
        expect(forOwner.status).toBe(route.owner)
      })
    }
  })
}
