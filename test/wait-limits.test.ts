import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitFor } from './helpers/waits.js'

// Regression (docs/security.md#smaller-findings): ?wait=true / Prefer: wait held connections that no cap
// counted.
describe('a request that waits for its run counts like a stream', () => {
  let store: Store
  let server: TestServer
  let alice: TestUser
  let conversationId: string
  let projectId: string

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      models: [new ScriptedModel({ id: 'm', turns: [{ text: 'done' }], whenExhausted: 'loop' })],
      streams: { maxPerToken: 1 },
    })
    alice = await server.createUser()
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'p' } })).body.id
    conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('past the per-token cap a waiting request is 429 too_many_streams, before any run is made', async () => {
    const abort = new AbortController()
    const stream = await fetch(`${server.url}/api/projects/${projectId}/events`, {
      headers: { authorization: `Bearer ${alice.token}`, accept: 'text/event-stream' },
      signal: abort.signal,
    })
    expect(stream.status).toBe(200)
    const refused = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
      token: alice.token,
      body: { input: 'hi' },
    })
    expect([refused.status, refused.body.code]).toEqual([429, 'too_many_streams'])
    expect(
      (await server.request('GET', `/api/conversations/${conversationId}/runs`, { token: alice.token })).body.items,
    ).toEqual([])
    // Without waiting, the run starts; once the stream is closed, waiting works again.
    abort.abort()
    // The closed stream frees its slot soon after: ask until it has.
    const waited = await waitFor(
      async () => {
        const answer = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
          token: alice.token,
          body: { input: 'hi' },
        })
        return answer.status === 429 ? undefined : answer
      },
      { timeoutMs: 10_000, what: 'a freed wait slot', intervalMs: 50 },
    )
    expect([waited.status, waited.body.status]).toEqual([201, 'completed'])
  })
  it('past the cap, POST …/ui-stream (useChat) is 429 too_many_streams before any run is made', async () => {
    const fresh = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    const abort = new AbortController()
    const stream = await fetch(`${server.url}/api/projects/${projectId}/events`, {
      headers: { authorization: `Bearer ${alice.token}`, accept: 'text/event-stream' },
      signal: abort.signal,
    })
    expect(stream.status).toBe(200)
    const body = {
      id: fresh,
      messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'hi' }] }],
      trigger: 'submit-message',
    }
    const refused = await server.request('POST', `/api/conversations/${fresh}/ui-stream`, { token: alice.token, body })
    expect([refused.status, refused.body.code]).toEqual([429, 'too_many_streams'])
    expect(
      (await server.request('GET', `/api/conversations/${fresh}/runs`, { token: alice.token })).body.items,
    ).toEqual([])
    abort.abort()
  })

  it('past the cap, POST …/runs with Accept: text/event-stream is 429 too_many_streams before any run is made', async () => {
    const fresh = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    const abort = new AbortController()
    const stream = await fetch(`${server.url}/api/projects/${projectId}/events`, {
      headers: { authorization: `Bearer ${alice.token}`, accept: 'text/event-stream' },
      signal: abort.signal,
    })
    expect(stream.status).toBe(200)
    const refused = await fetch(`${server.url}/api/conversations/${fresh}/runs`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${alice.token}`,
        accept: 'text/event-stream',
        'content-type': 'application/json',
      },
      body: JSON.stringify({ input: 'hi' }),
    })
    expect([refused.status, ((await refused.json()) as { code: string }).code]).toEqual([429, 'too_many_streams'])
    expect(
      (await server.request('GET', `/api/conversations/${fresh}/runs`, { token: alice.token })).body.items,
    ).toEqual([])
    abort.abort()
  })

  it('GET /api/runs/:id with Prefer: wait holds a slot too, and answers the run once it settles', async () => {
    const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: { input: 'again' },
    })
    expect(created.status).toBe(201)
    const waited = await waitFor(
      async () => {
        const answer = await server.request('GET', `/api/runs/${created.body.id}`, {
          token: alice.token,
          headers: { prefer: 'wait=30' },
        })
        return answer.status === 429 ? undefined : answer
      },
      { timeoutMs: 10_000, what: 'a freed wait slot', intervalMs: 50 },
    )
    expect([waited.status, waited.body.status]).toEqual([200, 'completed'])
  })
})
