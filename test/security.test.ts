import { Writable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createLogger } from '../src/app/index.js'
import { OpenAIChatModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { calls as authzCalls } from './__fixtures__/plugins/counting-authz.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { openaiTextChunks, openaiToolCallChunks, startFakeUpstream } from './helpers/fake-upstream.js'
import { collect, rawRequest, rawSocket } from './helpers/raw-http.js'
import { openSse } from './helpers/sse-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { recordFigures } from './reliability/figures.js'
import { waitFor, waitForRun } from './helpers/waits.js'

const fixture = (name: string): string => new URL(`./__fixtures__/plugins/${name}.ts`, import.meta.url).pathname
const adminToken = 'admin-secret-0123456789'
const scraperToken = 'scraper-secret-0123456789'
const missingId = '01ARZ3NDEKTSV4RRFFQ69G5FAV'

describe('failed authentication is rate-limited by address, before the token is looked at', () => {
  let store: Store
  let server: TestServer

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      adminToken,
      metricsToken: scraperToken,
      rateLimit: { max: 10_000, windowMs: 60_000, addressMax: 10_000, authFailureMax: 5 },
    })
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('counts wrong user and admin tokens; past the budget the address gets 429, whatever it sends', async () => {
    const alice = await server.createUser()
    for (let attempt = 0; attempt < 3; attempt++) {
      const answer = await server.request('GET', '/api/me', { token: `plt_wrong${attempt}` })
      expect(answer.status).toBe(401)
      // Every 401 carries the address budget.
      expect(answer.headers.get('x-ratelimit-limit')).toBe('10000')
      expect(answer.headers.get('x-ratelimit-remaining')).not.toBeNull()
    }
    for (let attempt = 0; attempt < 2; attempt++)
      expect((await server.request('GET', '/api/admin/users', { token: `wrong-admin-token-${attempt}` })).status).toBe(
        401,
      )
    // The address is now refused for guesses, and the answer says when to come back…
    const refused = await server.request('GET', '/api/me', { token: 'plt_wrong-again' })
    expect(refused.status).toBe(429)
    expect(refused.body.code).toBe('rate_limited')
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0)
    expect((await server.request('GET', '/api/me')).status).toBe(429)
    const admin = await server.request('GET', '/api/admin/users', { token: adminToken })
    expect(admin.status).toBe(429)
    // …but a valid user token behind the same address still works (it used to lock out everyone).
    const valid = await server.request('GET', '/api/me', { token: alice.token })
    expect([valid.status, valid.body.id]).toEqual([200, alice.user.id])
    // So does the metrics scraper's token; a wrong one gets 429 like any guess.
    expect((await server.request('GET', '/metrics', { token: scraperToken })).status).toBe(200)
    expect((await server.request('GET', '/metrics', { token: 'not-the-metrics-token' })).status).toBe(429)
    recordFigures('security-brute-force', [
      {
        check: 'Security: token brute force',
        figure:
          'after 5 failed tokens the address gets 429 with Retry-After for guesses and the admin API; valid user tokens still work',
        goal: 'rate-limited',
        ok: true,
      },
    ])
  })
})

describe('requests are limited per address before authentication; /metrics and /docs/json included', () => {
  let store: Store
  let server: TestServer

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      rateLimit: { max: 10_000, windowMs: 60_000, addressMax: 6, authFailureMax: 1000 },
    })
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('answers 429 once the address budget is spent, on unauthenticated routes too; probes are exempt', async () => {
    const statuses = []
    for (const path of [
      '/metrics',
      '/docs/json',
      '/metrics',
      '/docs/json',
      '/api/me',
      '/api/me',
      '/metrics',
      '/docs/json',
      '/api/me',
    ]) {
      statuses.push((await server.request('GET', path)).status)
    }
    expect(statuses.slice(0, 4)).toEqual([200, 200, 200, 200])
    expect(statuses.slice(6)).toEqual([429, 429, 429])
    expect((await server.request('GET', '/healthz')).status).toBe(200)
  })
})

describe('/metrics access', () => {
  let store: Store
  beforeAll(async () => {
    store = await openTestStore('pglite')
  })
  afterAll(async () => store?.close())

  it('is refused without PLINTH_METRICS_TOKEN when the server listens beyond loopback', async () => {
    const server = await startTestServer(store, { host: '0.0.0.0' })
    try {
      const answer = await server.request('GET', '/metrics')
      expect(answer.status).toBe(404)
      expect(answer.body.detail).toMatch(/PLINTH_METRICS_TOKEN/)
    } finally {
      await server.close()
    }
  })

  it('needs the metrics token once one is set, on loopback too', async () => {
    const server = await startTestServer(store, { metricsToken: 'metrics-secret-0123456789' })
    try {
      expect((await server.request('GET', '/metrics')).status).toBe(401)
      expect((await server.request('GET', '/metrics', { token: 'wrong-metrics-token-000' })).status).toBe(401)
      const answer = await server.request('GET', '/metrics', { token: 'metrics-secret-0123456789' })
      expect(answer.status).toBe(200)
      expect(answer.body).toContain('plinth_http_request_duration_seconds')
    } finally {
      await server.close()
    }
  })
})

describe('request timeouts and connection caps', () => {
  let store: Store
  let server: TestServer
  let alice: TestUser

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { requestTimeoutMs: 500, maxConnectionsPerAddress: 4 })
    alice = await server.createUser()
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('answers 408 problem+json and closes a request whose body never finishes', async () => {
    const socket = await rawSocket(server.url)
    const answer = await collect(socket, Date.now(), 5000, () =>
      socket.write(
        `POST /api/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${alice.token}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":`,
      ),
    )
    expect(answer.closed).toBe(true)
    expect(answer.status).toBe(408)
    expect(answer.json).toMatchObject({ code: 'request_timeout', status: 408 })
    expect(answer.elapsedMs).toBeLessThan(3000)
  })

  it('answers a protocol error on a kept-alive connection too (431 after an earlier answered request)', async () => {
    const socket = await rawSocket(server.url)
    const answer = await collect(socket, Date.now(), 5000, () =>
      socket.write(
        `GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(70_000)}\r\n\r\n`,
      ),
    )
    expect(answer.text.match(/HTTP\/1\.1 \d{3}/g)).toEqual(['HTTP/1.1 200', 'HTTP/1.1 431'])
  })

  it('answers a request once: one refused before its body (401) that then times out gets no second answer', async () => {
    const socket = await rawSocket(server.url)
    const answer = await collect(socket, Date.now(), 5000, () =>
      socket.write(
        'POST /api/projects HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":',
      ),
    )
    expect(answer.status).toBe(401)
    expect(answer.text.match(/HTTP\/1\.1 \d{3}/g)).toEqual(['HTTP/1.1 401'])
    expect(answer.closed).toBe(true)
  })

  it('caps open connections per client address with 429', async () => {
    const held = await Promise.all([1, 2, 3, 4].map(() => rawSocket(server.url)))
    try {
      const over = await rawRequest(server.url, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', 3000)
      expect(over.status).toBe(429)
      expect(over.json).toMatchObject({ code: 'rate_limited' })
      expect(over.closed).toBe(true)
    } finally {
      for (const socket of held) socket.destroy()
    }
    // Closed connections free their places.
    await waitFor(async () => (await server.request('GET', '/healthz')).status === 200, {
      what: 'a freed place',
    }).catch(() => undefined)
    expect((await server.request('GET', '/healthz')).status).toBe(200)
  })
})

for (const engine of apiEngines()) {
  describe(`hostile input on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let projectId: string
    let conversationId: string

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { plugins: ['rdm'], bodyLimit: 2 * 1024 * 1024 })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'target' } })).body
        .id
      conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const expectRejected = (
      answer: { status: number; body: { code?: string; errors?: Array<{ path: string }> } },
      path: string,
    ): void => {
      expect(answer.status, JSON.stringify(answer.body)).toBe(400)
      expect(answer.body.code).toBe('validation_failed')
      expect(answer.body.errors?.map((error) => error.path)).toContain(path)
    }

    for (const [label, bad] of [
      ['NUL', 'a\u0000b'],
      ['a lone surrogate', 'a\ud800b'],
    ] as const) {
      it(`answers 400 validation_failed naming the field for ${label} in any string`, async () => {
        const token = alice.token
        expectRejected(await server.request('POST', '/api/projects', { token, body: { name: bad } }), 'body.name')
        expectRejected(
          await server.request('PATCH', `/api/projects/${projectId}`, { token, body: { description: bad } }),
          'body.description',
        )
        expectRejected(
          await server.request('POST', `/api/projects/${projectId}/conversations`, { token, body: { title: bad } }),
          'body.title',
        )
        expectRejected(
          await server.request('POST', `/api/conversations/${conversationId}/runs`, { token, body: { input: bad } }),
          'body.input',
        )
        expectRejected(
          await server.request('POST', '/api/commands/rdm.ping', {
            token,
            body: { entrance: 'button', projectId, params: { target: bad } },
          }),
          'body.params.target',
        )
        expectRejected(
          await server.request('POST', '/api/commands/rdm.ping', {
            token,
            body: { entrance: 'slash', projectId, text: `/rdm.ping target=${bad}` },
          }),
          'body.text',
        )
        expectRejected(
          await server.request('POST', `/api/decisions/${missingId}`, {
            token,
            body: { decision: 'approve', note: bad },
          }),
          'body.note',
        )
        expectRejected(
          await server.request('POST', `/api/runs/${missingId}/tool-outputs`, {
            token,
            body: { outputs: [{ callId: missingId, output: { text: bad } }] },
          }),
          'body.outputs.0.output.text',
        )
        expectRejected(
          await server.request('POST', '/api/projects', { token, body: { name: 'ok', [`k${bad}`]: 1 } }),
          'body.ka\ufffdb',
        )
        if (label === 'NUL') {
          expectRejected(
            await server.request('GET', `/api/audit?commandId=${encodeURIComponent(bad)}`, { token }),
            'query.commandId',
          )
          expectRejected(
            await server.request('GET', `/api/projects?cursor=${encodeURIComponent(bad)}`, { token }),
            'query.cursor',
          )
          expectRejected(
            await server.request('GET', `/api/projects/${encodeURIComponent(bad)}`, { token }),
            'params.id',
          )
        } else {
          // A surrogate cannot be percent-encoded as UTF-8; its WTF-8 bytes decode to U+FFFD or are refused, never a 500.
          for (const path of [
            '/api/audit?commandId=a%ED%A0%80b',
            '/api/projects?cursor=a%ED%A0%80b',
            '/api/projects/a%ED%A0%80b',
          ]) {
            expect((await server.request('GET', path, { token })).status, path).toBeLessThan(500)
          }
        }
      })
    }

    it('answers 400 for ids that are not ULIDs, and for non-finite numbers and JSON nested 10,000 deep', async () => {
      const token = alice.token
      expectRejected(await server.request('GET', '/api/projects/not-an-id', { token }), 'params.id')
      expectRejected(
        await server.request('POST', '/api/commands/Rdm.Ping', { token, body: { entrance: 'button' } }),
        'params.commandId',
      )
      expectRejected(
        await server.request('POST', '/api/commands/rdm.ping', {
          token,
          body: { entrance: 'button', conversationId: 'x' },
        }),
        'body.conversationId',
      )
      expectRejected(
        await server.request('POST', `/api/conversations/${conversationId}/runs`, {
          token,
          rawBody: '{"input":"hi","maxIterations":1e309}',
        }),
        'body.maxIterations',
      )
      expectRejected(
        await server.request('POST', '/api/commands/rdm.ping', {
          token,
          rawBody: `{"entrance":"button","params":{"target":"x","n":-1e999}}`,
        }),
        'body.params.n',
      )
      const deep = `{"entrance":"button","params":{"target":${'['.repeat(10_000)}${']'.repeat(10_000)}}}`
      const answer = await server.request('POST', '/api/commands/rdm.ping', { token, rawBody: deep })
      expect(answer.status).toBe(400)
      expect(answer.body).toMatchObject({ code: 'validation_failed', detail: expect.stringMatching(/nested deeper/) })
      // Strings that merely look odd are fine.
      expect(
        (
          await server.request('POST', '/api/projects', {
            token,
            body: { name: 'emoji 🚀 and 中文 and \\u0000 as text' },
          })
        ).status,
      ).toBe(201)
    })
  })
}

describe('protocol-level errors are problem+json and echo nothing', () => {
  let store: Store
  let server: TestServer
  let alice: TestUser

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { bodyLimit: 2 * 1024 * 1024 })
    alice = await server.createUser()
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('a malformed percent-encoding, an over-long path segment and a garbage request line', async () => {
    const badUrl = await server.request('GET', '/api/projects/%E0%A4%A', { token: alice.token })
    expect(badUrl.status).toBe(400)
    expect(badUrl.headers.get('content-type')).toMatch(/problem\+json/)
    expect(JSON.stringify(badUrl.body)).not.toContain('%E0')

    const long = 'A'.repeat(5000)
    const tooLong = await server.request('GET', `/api/projects/${long}`, { token: alice.token })
    expect(tooLong.status).toBe(414)
    expect(tooLong.body.code).toBe('uri_too_long')
    expect(JSON.stringify(tooLong.body)).not.toContain(long.slice(0, 300))

    const garbage = await rawRequest(server.url, 'THIS IS NOT HTTP\r\n\r\n')
    expect(garbage.status).toBe(400)
    expect(garbage.json).toMatchObject({ code: 'bad_request' })

    // What Node would answer alone, without a body or without a word, is problem+json too.
    const expect417 = await rawRequest(server.url, 'GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n')
    expect(expect417.status).toBe(417)
    expect(expect417.json).toMatchObject({ code: 'expectation_failed', status: 417 })
    expect(expect417.closed).toBe(true)
    const tunnel = await rawRequest(server.url, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n')
    expect(tunnel.status).toBe(405)
    expect(tunnel.json).toMatchObject({ code: 'method_not_allowed' })
    expect(tunnel.text).toMatch(/\r\nAllow: GET, /)
    expect(tunnel.closed).toBe(true)
    expect((await server.request('GET', '/healthz')).status).toBe(200)
  })

  it('text/plain is 415; x-request-id is capped and sanitised; 869 KB of unknown keys gets a small answer', async () => {
    const plain = await server.request('POST', '/api/projects', {
      token: alice.token,
      rawBody: 'name=x',
      headers: { 'content-type': 'text/plain' },
    })
    expect(plain.status).toBe(415)
    expect(plain.body.code).toBe('unsupported_media_type')

    expect(
      (await server.request('GET', '/healthz', { headers: { 'x-request-id': 'trace-42.a:b' } })).headers.get(
        'x-request-id',
      ),
    ).toBe('trace-42.a:b')
    for (const bad of ['x'.repeat(1000), 'evil\tinjected value', 'a"b']) {
      const id = (await server.request('GET', '/healthz', { headers: { 'x-request-id': bad } })).headers.get(
        'x-request-id',
      )
      expect(id).toMatch(/^[0-9a-f-]{36}$/)
    }

    const body: Record<string, number> = { name: 1 }
    for (let index = 0; index < 60_000; index++) body[`unknown_field_${index}`] = index
    const raw = JSON.stringify(body)
    expect(raw.length).toBeGreaterThan(860_000)
    const answer = await server.request('POST', '/api/projects', { token: alice.token, rawBody: raw })
    expect(answer.status).toBe(400)
    expect(answer.body.errors.length).toBeLessThanOrEqual(20)
    expect(answer.body.errorCount).toBeGreaterThan(20)
    expect(JSON.stringify(answer.body).length).toBeLessThan(10_000)
  })
})

for (const engine of apiEngines()) {
  describe(`no cross-tenant oracle through the command bus on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let mallory: TestUser

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { plugins: ['rdm'] })
      alice = await server.createUser()
      mallory = await server.createUser()
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    it('another user’s conversation id answers 404, and neither audit learns anything from the attempt', async () => {
      const projectId = (
        await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'secret project' } })
      ).body.id
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
      const attempt = await server.request('POST', '/api/commands/rdm.ping', {
        token: mallory.token,
        body: { entrance: 'button', conversationId, params: { target: 'probe' } },
      })
      expect(attempt.status).toBe(404)
      expect(attempt.body.code).toBe('not_found')
      const viaProject = await server.request('POST', '/api/commands/rdm.ping', {
        token: mallory.token,
        body: { entrance: 'button', projectId, params: { target: 'probe2' } },
      })
      expect(viaProject.status).toBe(404)

      const malloryAudit = await server.request('GET', '/api/audit', { token: mallory.token })
      expect(malloryAudit.status).toBe(200)
      // The refused attempts are recorded for the caller, without the victim's ids.
      expect(malloryAudit.body.items.length).toBe(2)
      expect(JSON.stringify(malloryAudit.body)).not.toContain(projectId)
      expect(JSON.stringify(malloryAudit.body)).not.toContain(conversationId)
      const aliceAudit = await server.request('GET', '/api/audit', { token: alice.token })
      expect(JSON.stringify(aliceAudit.body)).not.toContain('probe')
      expect(JSON.stringify(aliceAudit.body)).not.toContain(mallory.user.id)
    })

    it('validates Idempotency-Key on commands and makes project, conversation and entrance part of its identity', async () => {
      const projectA = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'a' } })).body
        .id
      const projectB = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'b' } })).body
        .id
      const dispatch = (key: string, body: object) =>
        server.request('POST', '/api/commands/rdm.ping', {
          token: alice.token,
          headers: { 'idempotency-key': key },
          body,
        })
      for (const bad of ['k'.repeat(5000), 'has spaces in it']) {
        const answer = await dispatch(bad, { entrance: 'button', projectId: projectA, params: { target: 'x' } })
        expect(answer.status).toBe(400)
        expect(answer.body.code).toBe('validation_failed')
      }
      const first = await dispatch('key-1', { entrance: 'button', projectId: projectA, params: { target: 'x' } })
      expect(first.status).toBe(200)
      const replay = await dispatch('key-1', { entrance: 'button', projectId: projectA, params: { target: 'x' } })
      expect(replay.body.dispatchId).toBe(first.body.dispatchId)
      for (const other of [
        { entrance: 'button', projectId: projectB, params: { target: 'x' } },
        { entrance: 'card', projectId: projectA, params: { target: 'x' } },
        { entrance: 'button', params: { target: 'x' } },
      ]) {
        const answer = await dispatch('key-1', other)
        expect(answer.status, JSON.stringify(other)).toBe(422)
        expect(answer.body.code).toBe('idempotency_key_reused')
      }
    })
  })
}

describe('no timing oracle between another user’s project and a missing one', () => {
  let store: Store
  let server: TestServer

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { plugins: [fixture('counting-authz')] })
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('asks the ProjectAuthz adapter the same question either way', async () => {
    const owner = await server.createUser()
    const stranger = await server.createUser()
    const projectId = (await server.request('POST', '/api/projects', { token: owner.token, body: { name: 'p' } })).body
      .id
    authzCalls.length = 0
    expect((await server.request('GET', `/api/projects/${projectId}`, { token: stranger.token })).status).toBe(404)
    const forExisting = authzCalls.length
    authzCalls.length = 0
    expect((await server.request('GET', `/api/projects/${missingId}`, { token: stranger.token })).status).toBe(404)
    expect(forExisting).toBeGreaterThan(0)
    expect(authzCalls.length).toBe(forExisting)
  })
})

describe('no credential in any log line, at trace level', () => {
  it('runs a whole flow and finds none of the tokens, keys or secrets it used', async () => {
    const upstreamKey = 'sk-upstream-secret-key-0123456789'
    const metricsToken = 'metrics-secret-token-0123456789'
    const lines: string[] = []
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(...chunk.toString('utf8').split('\n').filter(Boolean))
        done()
      },
    })
    const logger = createLogger('trace', sink, [adminToken, metricsToken, upstreamKey])
    const upstream = await startFakeUpstream()
    const store = await openTestStore('pglite')
    const server = await startTestServer(store, {
      logger,
      adminToken,
      metricsToken,
      plugins: ['rdm'],
      models: [
        new OpenAIChatModel({
          id: 'gpt',
          model: 'gpt-test',
          baseUrl: `${upstream.url}/v1`,
          apiKey: upstreamKey,
          contextWindow: 100_000,
          supportsTools: true,
          idleTimeoutMs: 2000,
        }),
      ],
    })
    const secrets: string[] = [adminToken, metricsToken, upstreamKey]
    try {
      const created = await server.request('POST', '/api/admin/users', {
        token: adminToken,
        body: { name: 'logged-user' },
      })
      const token: string = created.body.token.token
      secrets.push(token)
      const projectId = (
        await server.request('POST', '/api/projects', {
          token,
          body: { name: 'p' },
          headers: { 'idempotency-key': 'idem-key-secretish-1' },
        })
      ).body.id
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
      ).body.id
      upstream.enqueue({
        kind: 'openai-stream',
        chunks: openaiToolCallChunks([{ id: 'call_1', name: 'rdm__ping', arguments: '{"target":"x"}' }]),
      })
      upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('done', 3) })
      const stream = await openSse(`${server.url}/api/conversations/${conversationId}/events`, { token })
      const run = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token,
        body: { input: 'ping x' },
      })
      expect(run.status).toBe(201)
      await stream.waitFor(5)
      await waitForRun(server, token, run.body.id, ['completed'])
      stream.close()
      // Credentials in places a client should not put them: the URL, a malformed request, a wrong token.
      await server.request('GET', `/api/me?access_token=${token}`, { token })
      await server.request('GET', '/metrics', { token: metricsToken })
      await server.request('GET', '/api/me', { token: `${token}x` })
      await rawRequest(
        server.url,
        `GET /api/me HTTP/1.1\r\nAuthorization: Bearer ${token}\r\nBroken header without colon\r\n\r\n`,
      )
      await rawRequest(server.url, `GARBAGE ${token}\r\n\r\n`)
      // A failing upstream (its error must not carry the key either).
      upstream.enqueue({ kind: 'error', status: 401, body: { error: { message: `invalid key ${upstreamKey}` } } })
      const failing = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token,
        body: { input: 'again' },
      })
      await waitForRun(server, token, failing.body.id, [
        'failed',
        'completed',
        'cancelled',
        'expired',
        'requires_action',
      ])
    } finally {
      await server.close()
      await store.close()
      await upstream.close()
    }
    expect(lines.length).toBeGreaterThan(10)
    // The malformed requests were logged (at debug), just without what they carried.
    expect(lines.some((line) => line.includes('"level":20') && line.includes('client error'))).toBe(true)
    for (const secret of secrets) {
      const leaks = lines.filter((line) => line.includes(secret))
      expect(leaks, `${secret.slice(0, 6)}… leaked`).toEqual([])
    }
    expect(lines.some((line) => line.includes('rawPacket'))).toBe(false)
    expect(lines.some((line) => line.includes('access_token=[redacted]'))).toBe(true)
    recordFigures('security-logs', [
      {
        check: 'Security: secrets in logs at trace level (a full run)',
        figure: `${lines.length} log lines scanned for ${secrets.length} secrets: 0 found`,
        goal: '0 secrets',
        ok: true,
      },
    ])
  })
})
