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

  /** Runs `attempt` while alice's one stream slot is taken by a project event stream, then closes that stream. */
  async function whileTheSlotIsHeld<T>(attempt: () => Promise<T>): Promise<T> {
    const abort = new AbortController()
    try {
      const stream = await fetch(`${server.url}/api/projects/${projectId}/events`, {
        headers: { authorization: `Bearer ${alice.token}`, accept: 'text/event-stream' },
        signal: abort.signal,
      })
      expect(stream.status).toBe(200)
      return await attempt()
    } finally {
      abort.abort()
    }
  }
  /** The refusal past the cap: 429 too_many_streams, and no run was made in the conversation. */
  async function expectRefusedBeforeAnyRun(refused: { status: number; code: string }, inConversation: string) {
    expect([refused.status, refused.code]).toEqual([429, 'too_many_streams'])
    expect(
      (await server.request('GET', `/api/conversations/${inConversation}/runs`, { token: alice.token })).body.items,
    ).toEqual([])
  }
  const newConversation = async (): Promise<string> =>
    (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body.id

  it('past the per-token cap a waiting request is 429 too_many_streams, before any run is made', async () => {
    await whileTheSlotIsHeld(async () => {
      const refused = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
        token: alice.token,
        body: { input: 'hi' },
      })
      await expectRefusedBeforeAnyRun({ status: refused.status, code: refused.body.code }, conversationId)
    })
    // Once the stream is closed, waiting works again. The closed stream frees its slot soon after: ask until it has.
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
    const fresh = await newConversation()
    await whileTheSlotIsHeld(async () => {
      const body = {
        id: fresh,
        messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'hi' }] }],
        trigger: 'submit-message',
      }
      const refused = await server.request('POST', `/api/conversations/${fresh}/ui-stream`, {
        token: alice.token,
        body,
      })
      await expectRefusedBeforeAnyRun({ status: refused.status, code: refused.body.code }, fresh)
    })
  })

  it('past the cap, POST …/runs with Accept: text/event-stream is 429 too_many_streams before any run is made', async () => {
    const fresh = await newConversation()
    await whileTheSlotIsHeld(async () => {
      const refused = await fetch(`${server.url}/api/conversations/${fresh}/runs`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${alice.token}`,
          accept: 'text/event-stream',
          'content-type': 'application/json',
        },
        body: JSON.stringify({ input: 'hi' }),
      })
      const { code } = (await refused.json()) as { code: string }
      await expectRefusedBeforeAnyRun({ status: refused.status, code }, fresh)
    })
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
