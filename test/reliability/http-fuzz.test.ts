import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../../src/llm/index.js'
import type { Store } from '../../src/store/index.js'
import { openTestStore } from '../helpers/engines.js'
import { startTestServer, type TestServer } from '../helpers/test-server.js'
import { recordFigures } from './figures.js'
import { fuzzHttp } from './http-fuzz.js'
import { rawRequest, rawSocket } from '../helpers/raw-http.js'

// HTTP fuzzing (docs/guides/reliability.md, R4; a short version inside npm test): requests generated from the
// server's own OpenAPI document, with a fixed seed. `npm run reliability` runs 10,000
// (RELIABILITY_REQUESTS, RELIABILITY_SEED).
const count = Number(process.env.RELIABILITY_REQUESTS ?? 3000)
const seed = Number(process.env.RELIABILITY_SEED ?? 20261130)

/** Heap in use after a full collection (vitest runs with --expose-gc; without it, as it is). */
function heapUsedMb(): number {
  ;(globalThis as { gc?: () => void }).gc?.()
  return process.memoryUsage().heapUsed / 2 ** 20
}

describe('HTTP fuzzing from the OpenAPI document', () => {
  let store: Store
  let server: TestServer

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      plugins: ['rdm'],
      models: [new ScriptedModel({ id: 'scripted', turns: [{ text: 'ok' }], whenExhausted: 'loop' })],
    })
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it(
    `${count} requests (seed ${seed}): no 5xx, every error problem+json with a documented code, nothing internal, the server alive`,
    { timeout: 600_000 },
    async () => {
      const owner = await server.createUser()
      const other = await server.createUser()
      const member = await server.createUser()
      const revoked = await server.createUser()
      await server.revoke(revoked)
      const project = (await server.request('POST', '/api/projects', { token: owner.token, body: { name: 'fuzz' } }))
        .body.id as string
      const conversation = (
        await server.request('POST', `/api/projects/${project}/conversations`, { token: owner.token, body: {} })
      ).body.id as string
      const run = (
        await server.request('POST', `/api/conversations/${conversation}/runs?wait=true`, {
          token: owner.token,
          body: { input: 'hi' },
        })
      ).body.id as string
      const knowledge = (
        await server.request('POST', `/api/projects/${project}/knowledge`, {
          token: owner.token,
          body: { title: 't', text: 'some text' },
        })
      ).body.id as string
      // The project is shared with the member (adding members asks: approved).
      const share = await server.request('POST', '/api/commands/rdm.member.add', {
        token: owner.token,
        body: { entrance: 'button', projectId: project, params: { userId: member.user.id } },
      })
      expect(
        (
          await server.request('POST', `/api/decisions/${share.body.decision.id}`, {
            token: owner.token,
            body: { decision: 'approve' },
          })
        ).status,
      ).toBe(200)
      const privateProject = (
        await server.request('POST', '/api/projects', { token: owner.token, body: { name: 'private' } })
      ).body.id as string
      const target = {
        url: server.url,
        tokens: { owner: owner.token, other: other.token, member: member.token, revoked: revoked.token },
        ids: [project, conversation, run, knowledge, privateProject],
        privateIds: {
          stranger: [project, conversation, run, knowledge, privateProject, owner.user.id],
          member: [conversation, run, privateProject],
        },
      }
      // Memory: measured after a warm-up, with a full collection, before and after the run.
      await fuzzHttp(target, { count: 200, seed: seed + 1 })
      const heapBefore = heapUsedMb()
      const report = await fuzzHttp(target, { count, seed })
      const heapAfter = heapUsedMb()
      const heapGrowth = heapAfter - heapBefore
      console.log(
        `[reliability] http fuzz: seed ${report.seed}, ${report.requests} requests over ${report.routes} operations, statuses ${JSON.stringify(report.byStatus)}, failures ${report.failures.length}, heap ${heapBefore.toFixed(0)} → ${heapAfter.toFixed(0)} MB`,
      )
      recordFigures('http-fuzz', [
        {
          check: 'R4 HTTP fuzzing from /docs/json (fast-check)',
          figure: `${report.requests} requests over ${report.routes} operations, seed ${report.seed}, ${report.failures.length} failures`,
          goal: '≥ 10,000 requests, 0 failures (no 5xx, problem+json, no leaks, alive)',
          ok: report.failures.length === 0 && report.requests >= 10_000,
        },
        {
          check: 'R4 fuzzing: heap after the run (full GC)',
          figure: `${heapBefore.toFixed(0)} → ${heapAfter.toFixed(0)} MB`,
          goal: 'back to baseline (+ ≤ 30 MB)',
          ok: heapGrowth <= 30,
        },
      ])
      expect(report.failures.slice(0, 20)).toEqual([])
      expect(report.requests).toBe(count)
      expect(heapGrowth).toBeLessThanOrEqual(30)
    },
  )
})

describe('hostile transport: broken chunked bodies, request smuggling, slowloris', () => {
  let store: Store
  let server: TestServer

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { requestTimeoutMs: 1500 })
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it(
    'refuses broken framing with 400 and closes; slow-header clients are cut off while others are served',
    { timeout: 60_000 },
    async () => {
      const user = await server.createUser()
      const head = `POST /api/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${user.token}\r\nContent-Type: application/json\r\n`
      const framing = [
        ['a chunk size that is not hex', `${head}Transfer-Encoding: chunked\r\n\r\nzz\r\n{"name":"a"}\r\n0\r\n\r\n`],
        ['a chunk longer than it says', `${head}Transfer-Encoding: chunked\r\n\r\n2\r\n{"name":"a"}\r\n0\r\n\r\n`],
        [
          'both Content-Length and Transfer-Encoding',
          `${head}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /api/me HTTP/1.1\r\nHost: x\r\n\r\n`,
        ],
        ['two Content-Lengths', `${head}Content-Length: 12\r\nContent-Length: 5\r\n\r\n{"name":"a"}`],
        ['an obsolete line folding header', `${head}X-Folded: a\r\n  b\r\nContent-Length: 12\r\n\r\n{"name":"a"}`],
      ] as const
      for (const [label, bytes] of framing) {
        const answer = await rawRequest(server.url, bytes, 5000)
        expect(answer.status, label).toBe(400)
        expect(answer.closed, label).toBe(true)
      }
      // A chunked body cut short: the connection is closed (408 when the timeout fires first), never a 5xx.
      const cut = await rawRequest(server.url, `${head}Transfer-Encoding: chunked\r\n\r\n20\r\n{"name":`, 5000)
      expect(cut.closed).toBe(true)
      expect(cut.status === 0 || cut.status === 408 || cut.status === 400).toBe(true)

      // Slowloris: clients that send their headers a byte at a time are closed after the request timeout,
      // and other clients are served meanwhile.
      const slow = await Promise.all(Array.from({ length: 20 }, () => rawSocket(server.url)))
      const started = Date.now()
      const closedAfter: number[] = []
      const drip = setInterval(() => {
        for (const socket of slow) if (!socket.destroyed) socket.write('X')
      }, 100)
      for (const socket of slow) {
        socket.write('GET /api/me HTTP/1.1\r\nHost: x\r\nX-Slow: ')
        socket.on('close', () => closedAfter.push(Date.now() - started))
      }
      try {
        for (let attempt = 0; attempt < 5; attempt++)
          expect((await server.request('GET', '/api/me', { token: user.token })).status).toBe(200)
        for (let waited = 0; closedAfter.length < slow.length && waited < 10_000; waited += 100)
          await new Promise((resolve) => setTimeout(resolve, 100))
      } finally {
        clearInterval(drip)
        for (const socket of slow) socket.destroy()
      }
      expect(closedAfter.length).toBe(slow.length)
      expect(Math.max(...closedAfter)).toBeLessThan(6000)
      recordFigures('http-transport', [
        {
          check: 'R4 hostile transport',
          figure: `${framing.length} broken framings → 400 and closed; 20 slowloris clients closed within ${Math.max(...closedAfter)} ms, others served`,
          goal: 'refused, never 5xx, server serves others',
          ok: true,
        },
      ])
    },
  )
})
