import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// A reconnect that is already caught up is the usual case: its 200 must not wait for an event or a
// heartbeat, or a client's connect timeout counts the reconnect as failed.
describe('an SSE stream with nothing to replay', () => {
  let store: Store
  let server: TestServer
  let alice: TestUser

  beforeAll(async () => {
    store = await openTestStore('pglite')
    // A heartbeat far away, so only the headers themselves can answer the request.
    server = await startTestServer(store, { sseHeartbeatMs: 600_000 })
    alice = await server.createUser()
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('answers 200 text/event-stream at once, for the project and the conversation streams', async () => {
    const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'p' } })).body
      .id
    const conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    for (const path of [`/api/projects/${projectId}/events`, `/api/conversations/${conversationId}/events`]) {
      // The newest event of that stream: resuming after it leaves nothing to replay.
      const replay = new AbortController()
      const first = await fetch(`${server.url}${path}`, {
        headers: { authorization: `Bearer ${alice.token}` },
        signal: replay.signal,
      })
      // conversation.created is the last event either stream has.
      const text = await readUntil(first, /event: conversation\.created\ndata: .*\n\n/)
      replay.abort()
      const newest = [...text.matchAll(/^id: (\d+)$/gm)].at(-1)![1]!
      const controller = new AbortController()
      // Far less than the heartbeat: only headers sent at once can make it.
      const timer = setTimeout(() => controller.abort(), 20_000)
      try {
        const answer = await fetch(`${server.url}${path}?after=${newest}`, {
          headers: { authorization: `Bearer ${alice.token}` },
          signal: controller.signal,
        })
        expect([answer.status, answer.headers.get('content-type')]).toEqual([200, 'text/event-stream'])
        const resumed = await fetch(`${server.url}${path}`, {
          headers: { authorization: `Bearer ${alice.token}`, 'last-event-id': newest },
          signal: controller.signal,
        })
        expect(resumed.status).toBe(200)
      } finally {
        clearTimeout(timer)
        controller.abort()
      }
    }
  })
})

/** Reads a streamed body until its text matches `pattern`. */
async function readUntil(response: Response, pattern: RegExp): Promise<string> {
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let text = ''
  while (!pattern.test(text)) {
    const { value, done } = await reader.read()
    if (done) break
    text += decoder.decode(value, { stream: true })
  }
  return text
}
