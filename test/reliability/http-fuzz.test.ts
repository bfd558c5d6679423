import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../../src/llm/index.js'
import type { Store } from '../../src/store/index.js'
import { openTestStore } from '../helpers/engines.js'
import { startTestServer, type TestServer } from '../helpers/test-server.js'
import { fuzzHttp } from './http-fuzz.js'

// Issue 14, R4 (short version inside npm test): requests generated from the server's own OpenAPI
// document, with a fixed seed. `npm run reliability` runs 10,000 (RELIABILITY_REQUESTS, RELIABILITY_SEED).
const count = Number(process.env.RELIABILITY_REQUESTS ?? 3000)
const seed = Number(process.env.RELIABILITY_SEED ?? 20261130)

describe('HTTP fuzzing from the OpenAPI document', () => {
  let store: Store
  let server: TestServer

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { plugins: ['rdm'], models: [new ScriptedModel({ id: 'scripted', turns: [{ text: 'ok' }], whenExhausted: 'loop' })] })
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it(`${count} requests (seed ${seed}): no 5xx, every error problem+json with a documented code, nothing internal, the server alive`, { timeout: 600_000 }, async () => {
    const owner = await server.createUser()
    const other = await server.createUser()
    const revoked = await server.createUser()
    await server.revoke(revoked)
    const project = (await server.request('POST', '/api/projects', { token: owner.token, body: { name: 'fuzz' } })).body.id as string
    const conversation = (await server.request('POST', `/api/projects/${project}/conversations`, { token: owner.token, body: {} })).body.id as string
    const run = (await server.request('POST', `/api/conversations/${conversation}/runs?wait=true`, { token: owner.token, body: { input: 'hi' } })).body.id as string
    const knowledge = (await server.request('POST', `/api/projects/${project}/knowledge`, { token: owner.token, body: { title: 't', text: 'some text' } })).body.id as string
    const report = await fuzzHttp({ url: server.url, tokens: { owner: owner.token, other: other.token, revoked: revoked.token }, ids: [project, conversation, run, knowledge] }, { count, seed })
    console.log(`[reliability] http fuzz: seed ${report.seed}, ${report.requests} requests over ${report.routes} operations, statuses ${JSON.stringify(report.byStatus)}, failures ${report.failures.length}`)
    expect(report.failures.slice(0, 20)).toEqual([])
    expect(report.requests).toBe(count)
  })
})
