import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Accounts, type Store } from '../src/store/index.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { testDb } from '../src/store/test-access.js'
import { rawRequest } from './helpers/raw-http.js'

function expectProblem(
  answer: { status: number; headers: Headers; body: { code?: string; status?: number; title?: string } },
  status: number,
  code: string,
): void {
  expect(answer.status).toBe(status)
  expect(answer.headers.get('content-type')).toMatch(/^application\/problem\+json/)
  expect(answer.body.code).toBe(code)
  expect(answer.body.status).toBe(status)
  expect(typeof answer.body.title).toBe('string')
  expect(JSON.stringify(answer.body)).not.toMatch(/\n\s+at /)
}

for (const engine of apiEngines()) {
  describe(`HTTP API on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let bob: TestUser

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store)
      alice = await server.createUser('alice')
      bob = await server.createUser('bob')
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    // Regression (docs/security.md#smaller-findings): /docs (Swagger UI) had no security headers.
    it('serves the API explorer with a strict CSP, never framed, without MIME sniffing', async () => {
      for (const path of ['/docs', '/docs/static/swagger-initializer.js', '/docs/json']) {
        const answer = await fetch(`${server.url}${path}`)
        expect(answer.status, path).toBe(200)
        const csp = answer.headers.get('content-security-policy') ?? ''
        expect(csp, path).toContain("frame-ancestors 'none'")
        expect(csp, path).toContain("object-src 'none'")
        expect(csp).not.toContain('validator.swagger.io')
        expect(answer.headers.get('x-content-type-options')).toBe('nosniff')
        expect(answer.headers.get('x-frame-options')).toBe('DENY')
        await answer.arrayBuffer()
      }
    })

    it('answers health, readiness, metrics and the OpenAPI document without a token', async () => {
      expect((await server.request('GET', '/healthz')).body).toEqual({ status: 'ok' })
      // The default backend is the sandbox; where it cannot work, exec tools are off and readiness says why.
      const ready = (await server.request('GET', '/readyz')).body
      expect(ready).toMatchObject({ status: 'ready', exec: { backend: 'sandbox', sandboxReady: expect.any(Boolean) } })
      expect(ready.warnings).toEqual(ready.exec.sandboxReady ? [] : [expect.stringMatching(/^exec tools are off/)])
      const metrics = await server.request('GET', '/metrics')
      expect(metrics.status).toBe(200)
      expect(metrics.body).toContain('plinth_http_request_duration_seconds')
      const openapi = await server.request('GET', '/docs/json')
      expect(openapi.status).toBe(200)
      expect(Object.keys(openapi.body.paths)).toEqual(
        expect.arrayContaining([
          '/api/me',
          '/api/projects',
          '/api/projects/{id}',
          '/api/projects/{id}/conversations',
          '/api/conversations/{id}',
          '/api/conversations/{id}/messages',
          '/api/projects/{id}/events',
          '/api/conversations/{id}/events',
        ]),
      )
      const ui = await server.request('GET', '/docs/')
      expect(ui.status).toBe(200)
    })

    it('identifies the caller', async () => {
      const me = await server.request('GET', '/api/me', { token: alice.token })
      expect(me.status).toBe(200)
      expect(me.body).toEqual({
        id: alice.user.id,
        name: 'alice',
        disabled: false,
        budget: null,
        createdAt: expect.any(String),
      })
    })

    it('creates, reads, updates and soft-deletes projects, with camelCase JSON and a request id', async () => {
      const created = await server.request('POST', '/api/projects', {
        token: alice.token,
        body: { name: 'Apollo', description: 'moon' },
      })
      expect(created.status).toBe(201)
      expect(created.headers.get('x-request-id')).toBeTruthy()
      expect(created.body).toEqual({
        id: expect.any(String),
        ownerId: alice.user.id,
        name: 'Apollo',
        description: 'moon',
        runtimes: [],
        systemPrompt: null,
        defaultModel: null,
        modelParams: {},
        tools: null,
        injectMemberKnowledge: false,
        memoryRecall: true,
        budget: null,
        quota: null,
        retention: null,
        shared: false,
        createdAt: expect.any(String),
        updatedAt: expect.any(String),
      })
      const id = created.body.id as string
      expect((await server.request('GET', `/api/projects/${id}`, { token: alice.token })).body.name).toBe('Apollo')
      const patched = await server.request('PATCH', `/api/projects/${id}`, {
        token: alice.token,
        body: { name: 'Artemis' },
      })
      expect(patched.status).toBe(200)
      expect(patched.body).toMatchObject({ name: 'Artemis', description: 'moon' })
      const deleted = await server.request('DELETE', `/api/projects/${id}`, { token: alice.token })
      expect(deleted.status).toBe(204)
      expectProblem(await server.request('GET', `/api/projects/${id}`, { token: alice.token }), 404, 'not_found')
      const list = await server.request('GET', '/api/projects', { token: alice.token })
      expect(list.body.items.map((project: { id: string }) => project.id)).not.toContain(id)
      // Soft delete: the row and its history remain.
      const row = await testDb(store)
        .selectFrom('projects')
        .select(['deleted_at'])
        .where('id', '=', id)
        .executeTakeFirst()
      expect(row?.deleted_at).toBeInstanceOf(Date)
    })

    it('pages lists with an opaque cursor, newest first, and rejects cursors it did not issue', async () => {
      const carol = await server.createUser()
      const names = ['p1', 'p2', 'p3', 'p4', 'p5']
      for (const name of names) await server.request('POST', '/api/projects', { token: carol.token, body: { name } })
      const seen: string[] = []
      let cursor: string | null = null
      let pages = 0
      do {
        const query: string = cursor ? `?limit=2&cursor=${encodeURIComponent(cursor)}` : '?limit=2'
        const page = await server.request('GET', `/api/projects${query}`, { token: carol.token })
        expect(page.status).toBe(200)
        expect(page.body.items.length).toBeLessThanOrEqual(2)
        seen.push(...page.body.items.map((project: { name: string }) => project.name))
        cursor = page.body.nextCursor
        pages++
      } while (cursor)
      expect(seen).toEqual([...names].reverse())
      expect(pages).toBe(3)
      expectProblem(
        await server.request('GET', '/api/projects?cursor=garbage', { token: carol.token }),
        400,
        'invalid_cursor',
      )
      expectProblem(
        await server.request('GET', `/api/projects?cursor=${Buffer.from('{"after":"x"}').toString('base64url')}`, {
          token: carol.token,
        }),
        400,
        'invalid_cursor',
      )
      expectProblem(
        await server.request('GET', '/api/projects?limit=0', { token: carol.token }),
        400,
        'validation_failed',
      )
      expectProblem(
        await server.request('GET', '/api/projects?limit=abc', { token: carol.token }),
        400,
        'validation_failed',
      )
      expectProblem(
        await server.request('GET', '/api/projects?bogus=1', { token: carol.token }),
        400,
        'validation_failed',
      )
    })

    it('creates conversations in a project and lists, patches and deletes them; messages start empty', async () => {
      const project = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'chat' } }))
        .body
      const created = await server.request('POST', `/api/projects/${project.id}/conversations`, {
        token: alice.token,
        body: { title: 'first' },
      })
      expect(created.status).toBe(201)
      expect(created.body).toEqual({
        id: expect.any(String),
        projectId: project.id,
        ownerId: alice.user.id,
        title: 'first',
        permissionMode: 'manual',
        modeExpiresAt: null,
        activeRunId: null,
        createdAt: expect.any(String),
        updatedAt: expect.any(String),
      })
      const untitled = await server.request('POST', `/api/projects/${project.id}/conversations`, { token: alice.token })
      expect(untitled.status).toBe(201)
      expect(untitled.body.title).toBe('')
      const list = await server.request('GET', `/api/projects/${project.id}/conversations`, { token: alice.token })
      expect(list.body.items.map((conversation: { id: string }) => conversation.id)).toEqual([
        untitled.body.id,
        created.body.id,
      ])
      const full = await server.request('PATCH', `/api/conversations/${created.body.id}`, {
        token: alice.token,
        body: { permissionMode: 'full', title: 'renamed' },
      })
      expect(full.body).toMatchObject({ permissionMode: 'full', title: 'renamed' })
      expect(Date.parse(full.body.modeExpiresAt)).toBeGreaterThan(Date.now())
      const manual = await server.request('PATCH', `/api/conversations/${created.body.id}`, {
        token: alice.token,
        body: { permissionMode: 'manual' },
      })
      expect(manual.body).toMatchObject({ permissionMode: 'manual', modeExpiresAt: null })
      expectProblem(
        await server.request('PATCH', `/api/conversations/${created.body.id}`, {
          token: alice.token,
          body: { permissionMode: 'yolo' },
        }),
        400,
        'validation_failed',
      )
      const messages = await server.request('GET', `/api/conversations/${created.body.id}/messages`, {
        token: alice.token,
      })
      expect(messages.body).toEqual({ items: [], nextCursor: null })
      expect(
        (await server.request('DELETE', `/api/conversations/${untitled.body.id}`, { token: alice.token })).status,
      ).toBe(204)
      expectProblem(
        await server.request('GET', `/api/conversations/${untitled.body.id}`, { token: alice.token }),
        404,
        'not_found',
      )
      // Deleting the project hides its conversations too.
      await server.request('DELETE', `/api/projects/${project.id}`, { token: alice.token })
      expectProblem(
        await server.request('GET', `/api/conversations/${created.body.id}`, { token: alice.token }),
        404,
        'not_found',
      )
    })

    it('replays a creating POST with the same Idempotency-Key and refuses the key for a different body', async () => {
      const headers = { 'idempotency-key': `key-${engine}-1` }
      const first = await server.request('POST', '/api/projects', {
        token: alice.token,
        body: { name: 'once' },
        headers,
      })
      const again = await server.request('POST', '/api/projects', {
        token: alice.token,
        body: { name: 'once' },
        headers,
      })
      expect(first.status).toBe(201)
      expect(again.status).toBe(201)
      expect(again.body).toEqual(first.body)
      expect(again.headers.get('idempotent-replayed')).toBe('true')
      const different = await server.request('POST', '/api/projects', {
        token: alice.token,
        body: { name: 'twice' },
        headers,
      })
      expectProblem(different, 422, 'idempotency_key_reused')
      const list = await server.request('GET', '/api/projects?limit=200', { token: alice.token })
      expect(list.body.items.filter((project: { name: string }) => project.name === 'once')).toHaveLength(1)
      expect(list.body.items.filter((project: { name: string }) => project.name === 'twice')).toHaveLength(0)
      // Keys are per user: bob's same key is his own.
      const bobs = await server.request('POST', '/api/projects', { token: bob.token, body: { name: 'bobs' }, headers })
      expect(bobs.status).toBe(201)
      // Concurrent duplicates create one project.
      const racing = { 'idempotency-key': `key-${engine}-race` }
      const answers = await Promise.all(
        Array.from({ length: 5 }, () =>
          server.request('POST', '/api/projects', { token: alice.token, body: { name: 'raced' }, headers: racing }),
        ),
      )
      expect(new Set(answers.map((answer) => answer.body.id)).size).toBe(1)
      expect(answers.every((answer) => answer.status === 201)).toBe(true)
      expectProblem(
        await server.request('POST', '/api/projects', {
          token: alice.token,
          body: { name: 'x' },
          headers: { 'idempotency-key': 'é'.repeat(3) },
        }),
        400,
        'validation_failed',
      )
    })

    it('answers malformed input with 4xx problem+json and writes nothing', async () => {
      const countProjects = async (): Promise<number> =>
        (await testDb(store).selectFrom('projects').select('id').execute()).length
      const formed = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'formed' } }))
        .body.id
      const before = await countProjects()
      expectProblem(
        await server.request('POST', '/api/projects', { token: alice.token, rawBody: '{"name": ' }),
        400,
        'invalid_json',
      )
      const wrongType = await server.request('POST', '/api/projects', { token: alice.token, body: { name: 42 } })
      expectProblem(wrongType, 400, 'validation_failed')
      expect(wrongType.body.errors).toEqual([{ path: 'body.name', message: expect.any(String) }])
      const unknown = await server.request('POST', '/api/projects', {
        token: alice.token,
        body: { name: 'ok', color: 'red', size: 2 },
      })
      expectProblem(unknown, 400, 'validation_failed')
      expect(unknown.body.errors.map((error: { path: string }) => error.path).sort()).toEqual([
        'body.color',
        'body.size',
      ])
      const missing = await server.request('POST', '/api/projects', { token: alice.token, body: {} })
      expect(missing.body.errors).toEqual([{ path: 'body.name', message: 'is required' }])
      // A method the path does not take is 405 with Allow; a path nothing answers is 404.
      const wrongMethod = await server.request('DELETE', '/api/projects', { token: alice.token })
      expectProblem(wrongMethod, 405, 'method_not_allowed')
      expect(wrongMethod.headers.get('allow')).toBe('GET, HEAD, POST')
      expectProblem(
        await server.request('PUT', '/api/projects/01ARZ3NDEKTSV4RRFFQ69G5FAV', { token: alice.token, body: {} }),
        405,
        'method_not_allowed',
      )
      // A route that takes no body, called with a JSON Content-Type and nothing after it: not a JSON error.
      const bodiless = await fetch(`${server.url}/api/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel`, {
        method: 'POST',
        headers: { authorization: `Bearer ${alice.token}`, 'content-type': 'application/json' },
      })
      expect([bodiless.status, ((await bodiless.json()) as { code: string }).code]).toEqual([404, 'not_found'])
      // The same without a Content-Length (what `curl -X POST -H 'Content-Type: application/json'` sends).
      for (const path of ['/api/runs/:id/cancel', '/api/runs/:id/resume', '/api/knowledge/:id/publish']) {
        const target = new URL(server.url)
        const answer = await rawRequest(
          server.url,
          `POST ${path.replace(':id', '01ARZ3NDEKTSV4RRFFQ69G5FAV')} HTTP/1.1\r\nHost: ${target.host}\r\n` +
            `Authorization: Bearer ${alice.token}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n`,
        )
        expect([path, answer.status, answer.json?.code]).toEqual([path, 404, 'not_found'])
      }
      const blank = await server.request('POST', '/api/projects', { token: alice.token, body: { name: '   ' } })
      expect(blank.body.errors).toEqual([{ path: 'body.name', message: 'must not be blank' }])
      // A union of literals is said once, with what it takes.
      const answer = await server.request('POST', '/api/decisions/01ARZ3NDEKTSV4RRFFQ69G5FAV', {
        token: alice.token,
        body: { decision: 'maybe' },
      })
      expectProblem(answer, 400, 'validation_failed')
      expect(answer.body.errors).toEqual([
        { path: 'body.decision', message: expect.stringMatching(/^must be one of approve, .*reject/) },
      ])
      expectProblem(
        await server.request('POST', '/api/projects', { token: alice.token, body: ['array'] }),
        400,
        'validation_failed',
      )
      expectProblem(
        await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'x'.repeat(100_000) } }),
        413,
        'payload_too_large',
      )
      expectProblem(
        await server.request('POST', '/api/projects', {
          token: alice.token,
          rawBody: 'name=x',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
        }),
        415,
        'unsupported_media_type',
      )
      // A form is no JSON body either: not read as an empty one (a PATCH that changed nothing, a blank title).
      const form = '--zzz\r\nContent-Disposition: form-data; name="title"\r\n\r\nvia form\r\n--zzz--\r\n'
      const formHeaders = { 'content-type': 'multipart/form-data; boundary=zzz' }
      for (const [method, path] of [
        ['POST', '/api/projects'],
        ['POST', `/api/projects/${formed}/conversations`],
        ['PATCH', `/api/projects/${formed}`],
      ] as const)
        expectProblem(
          await server.request(method, path, { token: alice.token, rawBody: form, headers: formHeaders }),
          415,
          'unsupported_media_type',
        )
      expect(
        (await server.request('GET', `/api/projects/${formed}/conversations`, { token: alice.token })).body.items,
      ).toEqual([])
      // A compressed body is not read as if it were plain JSON (nor a plain one labelled compressed).
      for (const encoding of ['gzip', 'br', 'deflate, gzip']) {
        const encoded = await server.request('POST', '/api/projects', {
          token: alice.token,
          rawBody: JSON.stringify({ name: `via ${encoding}` }),
          headers: { 'content-type': 'application/json', 'content-encoding': encoding },
        })
        expectProblem(encoded, 415, 'unsupported_media_type')
        expect(encoded.body.detail).toMatch(/content-encoding .* is not accepted; send the body uncompressed/)
        expect(encoded.headers.get('accept-encoding')).toBe('identity')
      }
      const identity = await server.request('PATCH', `/api/projects/${formed}`, {
        token: alice.token,
        body: { name: 'identity' },
        headers: { 'content-encoding': 'identity' },
      })
      expect([identity.status, identity.body.name]).toEqual([200, 'identity'])
      expectProblem(await server.request('GET', '/api/nothing-here', { token: alice.token }), 404, 'not_found')
      expectProblem(
        await server.request('GET', '/api/projects/../../etc/passwd', { token: alice.token }),
        404,
        'not_found',
      )
      expect(await countProjects()).toBe(before)
    })

    it("answers 404 for another user's project and conversation on every route, exactly like a missing id", async () => {
      const project = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'private' } }))
        .body
      const conversation = (
        await server.request('POST', `/api/projects/${project.id}/conversations`, { token: alice.token, body: {} })
      ).body
      const missing = '01ARZ3NDEKTSV4RRFFQ69G5FAV'
      for (const id of [project.id, missing]) {
        expectProblem(await server.request('GET', `/api/projects/${id}`, { token: bob.token }), 404, 'not_found')
        expectProblem(
          await server.request('PATCH', `/api/projects/${id}`, { token: bob.token, body: { name: 'mine' } }),
          404,
          'not_found',
        )
        expectProblem(await server.request('DELETE', `/api/projects/${id}`, { token: bob.token }), 404, 'not_found')
        expectProblem(
          await server.request('POST', `/api/projects/${id}/conversations`, { token: bob.token, body: {} }),
          404,
          'not_found',
        )
        expectProblem(
          await server.request('GET', `/api/projects/${id}/conversations`, { token: bob.token }),
          404,
          'not_found',
        )
        expectProblem(await server.request('GET', `/api/projects/${id}/events`, { token: bob.token }), 404, 'not_found')
      }
      for (const id of [conversation.id, missing]) {
        expectProblem(await server.request('GET', `/api/conversations/${id}`, { token: bob.token }), 404, 'not_found')
        expectProblem(
          await server.request('PATCH', `/api/conversations/${id}`, { token: bob.token, body: { title: 'x' } }),
          404,
          'not_found',
        )
        expectProblem(
          await server.request('DELETE', `/api/conversations/${id}`, { token: bob.token }),
          404,
          'not_found',
        )
        expectProblem(
          await server.request('GET', `/api/conversations/${id}/messages`, { token: bob.token }),
          404,
          'not_found',
        )
        expectProblem(
          await server.request('GET', `/api/conversations/${id}/events`, { token: bob.token }),
          404,
          'not_found',
        )
      }
      // Nothing changed for the owner.
      expect((await server.request('GET', `/api/projects/${project.id}`, { token: alice.token })).body.name).toBe(
        'private',
      )
      const bobsList = await server.request('GET', '/api/projects?limit=200', { token: bob.token })
      expect(bobsList.body.items.map((item: { id: string }) => item.id)).not.toContain(project.id)
    })

    it('appends an event for every change, in the same transaction as the change', async () => {
      const project = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'evented' } }))
        .body
      const conversation = (
        await server.request('POST', `/api/projects/${project.id}/conversations`, { token: alice.token, body: {} })
      ).body
      await server.request('PATCH', `/api/conversations/${conversation.id}`, {
        token: alice.token,
        body: { title: 't' },
      })
      await server.request('DELETE', `/api/conversations/${conversation.id}`, { token: alice.token })
      await server.request('PATCH', `/api/projects/${project.id}`, { token: alice.token, body: { description: 'd' } })
      await server.request('DELETE', `/api/projects/${project.id}`, { token: alice.token })
      const events = await testDb(store)
        .selectFrom('events')
        .select(['type', 'conversation_id'])
        .where('project_id', '=', project.id)
        .orderBy('id')
        .execute()
      expect(events.map((event) => event.type)).toEqual([
        'project.created',
        'conversation.created',
        'conversation.updated',
        'conversation.deleted',
        'project.updated',
        'project.deleted',
      ])
    })
  })
}

describe('limits', () => {
  let store: Store
  let server: TestServer
  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { rateLimit: { max: 5, windowMs: 60_000 } })
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('rate-limits per token with 429 problem+json, leaving other tokens and health checks alone', async () => {
    const noisy = await server.createUser()
    const quiet = await server.createUser()
    const statuses: number[] = []
    for (let index = 0; index < 7; index++)
      statuses.push((await server.request('GET', '/api/me', { token: noisy.token })).status)
    expect(statuses.slice(0, 5)).toEqual([200, 200, 200, 200, 200])
    const limited = await server.request('GET', '/api/me', { token: noisy.token })
    expectProblem(limited, 429, 'rate_limited')
    expect(limited.headers.get('retry-after')).toBeTruthy()
    // The window as configured (not the time left in it, which Retry-After says).
    expect(limited.body.detail).toMatch(
      /^rate limit of 5 requests per 1 minute exceeded; retry in \d+ (seconds?|minutes?)$/,
    )
    expect((await server.request('GET', '/api/me', { token: quiet.token })).status).toBe(200)
    for (let index = 0; index < 10; index++) expect((await server.request('GET', '/healthz')).status).toBe(200)
  })
})

describe('admin API', () => {
  let store: Store
  let server: TestServer
  let disabledServer: TestServer
  const adminToken = 'admin-secret-0123456789'
  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { adminToken })
    disabledServer = await startTestServer(store)
  })
  afterAll(async () => {
    await server?.close()
    await disabledServer?.close()
    await store?.close()
  })

  it('creates, lists and disables users and issues and revokes tokens with the admin token', async () => {
    const admin = { token: adminToken }
    const created = await server.request('POST', '/api/admin/users', { ...admin, body: { name: 'dora' } })
    expect(created.status).toBe(201)
    expect(created.body.user).toMatchObject({ name: 'dora', disabled: false })
    expect(created.body.token.token).toMatch(/^plt_[A-Za-z0-9_-]{43}$/)
    const doraToken = created.body.token.token as string
    expect((await server.request('GET', '/api/me', { token: doraToken })).body.name).toBe('dora')
    expectProblem(
      await server.request('POST', '/api/admin/users', { ...admin, body: { name: 'dora' } }),
      409,
      'name_taken',
    )
    // Names tell people apart: one differing only in case is taken, and one shaped like an id (which
    // `plinth users …` and sharing also accept) is refused.
    const cased = await server.request('POST', '/api/admin/users', { ...admin, body: { name: 'DORA' } })
    expectProblem(cased, 409, 'name_taken')
    expect(cased.body.detail).toMatch(/"dora" exists/)
    // Found by name regardless of case (the CLI, designated approvers), also a name whose lower case
    // Postgres and JavaScript write differently.
    const accounts = new Accounts(store)
    expect((await accounts.findUser('DoRa'))?.name).toBe('dora')
    expect((await server.request('POST', '/api/admin/users', { ...admin, body: { name: 'İlker' } })).status).toBe(201)
    expect((await accounts.findUser('İlker'))?.name).toBe('İlker')
    const idLike = await server.request('POST', '/api/admin/users', { ...admin, body: { name: created.body.user.id } })
    expectProblem(idLike, 400, 'validation_failed')
    expect(idLike.body.errors).toEqual([{ path: 'body.name', message: expect.stringMatching(/looks like an id/) }])
    const list = await server.request('GET', '/api/admin/users', admin)
    expect(list.body.items.map((user: { name: string }) => user.name)).toContain('dora')
    const second = await server.request('POST', `/api/admin/users/${created.body.user.id}/tokens`, {
      ...admin,
      body: { name: 'ci' },
    })
    expect(second.status).toBe(201)
    const tokens = await server.request('GET', `/api/admin/users/${created.body.user.id}/tokens`, admin)
    expect(tokens.body.items).toHaveLength(2)
    expect(JSON.stringify(tokens.body)).not.toContain(doraToken)
    expect((await server.request('DELETE', `/api/admin/tokens/${second.body.id}`, admin)).status).toBe(204)
    expectProblem(await server.request('GET', '/api/me', { token: second.body.token }), 401, 'unauthorized')
    const disabled = await server.request('PATCH', `/api/admin/users/${created.body.user.id}`, {
      ...admin,
      body: { disabled: true },
    })
    expect(disabled.body.disabled).toBe(true)
    expectProblem(await server.request('GET', '/api/me', { token: doraToken }), 401, 'unauthorized')
    await server.request('PATCH', `/api/admin/users/${created.body.user.id}`, { ...admin, body: { disabled: false } })
    expect((await server.request('GET', '/api/me', { token: doraToken })).status).toBe(200)
  })

  it('refuses user tokens, wrong tokens and no token; is absent without PLINTH_ADMIN_TOKEN', async () => {
    const user = await server.createUser()
    expectProblem(await server.request('GET', '/api/admin/users', { token: user.token }), 401, 'unauthorized')
    expectProblem(await server.request('GET', '/api/admin/users', { token: `${adminToken}x` }), 401, 'unauthorized')
    expectProblem(await server.request('GET', '/api/admin/users'), 401, 'unauthorized')
    expectProblem(await disabledServer.request('GET', '/api/admin/users', { token: adminToken }), 404, 'not_found')
  })
})
