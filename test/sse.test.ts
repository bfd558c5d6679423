import { connect } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { createTestDatabase, openTestStore, testEngines, type TestDatabase } from './helpers/engines.js'
import { openSse } from './helpers/sse-client.js'
import { waitFor } from './helpers/waits.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

for (const engine of testEngines()) {
  describe(`SSE event streams on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { sseHeartbeatMs: 200 })
      alice = await server.createUser()
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const newProject = async (): Promise<string> =>
      (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'streamed' } })).body.id
    const newConversation = async (projectId: string, title = ''): Promise<string> =>
      (
        await server.request('POST', `/api/projects/${projectId}/conversations`, {
          token: alice.token,
          body: { title },
        })
      ).body.id

    it('streams a project’s events live with id, event and JSON data, and sends heartbeats', async () => {
      const projectId = await newProject()
      const stream = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: alice.token })
      expect(stream.status).toBe(200)
      expect(stream.headers.get('content-type')).toMatch(/^text\/event-stream/)
      await stream.waitFor(1)
      const conversationId = await newConversation(projectId, 'live')
      const events = await stream.waitFor(2)
      expect(events[0]).toMatchObject({ event: 'project.created', data: { project: { id: projectId } } })
      expect(events[1]).toMatchObject({
        event: 'conversation.created',
        data: { conversation: { id: conversationId, title: 'live', projectId } },
      })
      expect(Number(events[1]!.id)).toBeGreaterThan(Number(events[0]!.id))
      await waitFor(() => /^: ?heartbeat/m.test(stream.raw()), { what: 'a heartbeat' })
      expect(stream.raw()).toMatch(/^: ?heartbeat/m)
      stream.close()
    })

    it('replays exactly the missed events on reconnect with Last-Event-ID or ?after=, then goes live', async () => {
      const projectId = await newProject()
      const first = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: alice.token })
      await newConversation(projectId, 'a')
      const seen = await first.waitFor(2)
      first.close()
      const lastSeen = seen[1]!.id!
      // While disconnected:
      const missedB = await newConversation(projectId, 'b')
      await server.request('PATCH', `/api/projects/${projectId}`, { token: alice.token, body: { name: 'renamed' } })
      const resumed = await openSse(`${server.url}/api/projects/${projectId}/events`, {
        token: alice.token,
        lastEventId: lastSeen,
      })
      const replayed = await resumed.waitFor(2)
      expect(replayed.map((event) => event.event)).toEqual(['conversation.created', 'project.updated'])
      expect(replayed[0]!.data.conversation.id).toBe(missedB)
      const live = await newConversation(projectId, 'c')
      const after = await resumed.waitFor(3)
      expect(after[2]!.data.conversation.id).toBe(live)
      // No duplicates trail in: an absence, so a short fixed while is the assertion's window.
      await new Promise((resolve) => setTimeout(resolve, 200))
      expect(resumed.events).toHaveLength(3)
      resumed.close()

      const viaQuery = await openSse(`${server.url}/api/projects/${projectId}/events?after=${lastSeen}`, {
        token: alice.token,
      })
      expect((await viaQuery.waitFor(3)).map((event) => event.id)).toEqual(after.map((event) => event.id))
      viaQuery.close()
    })

    it('rejects a Last-Event-ID or ?after= that is not a non-negative integer with 400 problem+json', async () => {
      const projectId = await newProject()
      for (const bad of ['abc', '-1', '1.5', '12abc']) {
        const viaHeader = await server.request('GET', `/api/projects/${projectId}/events`, {
          token: alice.token,
          headers: { 'last-event-id': bad },
        })
        expect(viaHeader.status).toBe(400)
        expect(viaHeader.body.code).toBe('invalid_last_event_id')
        const viaQuery = await server.request(
          'GET',
          `/api/projects/${projectId}/events?after=${encodeURIComponent(bad)}`,
          { token: alice.token },
        )
        expect(viaQuery.status).toBe(400)
        expect(viaQuery.body.code).toBe('invalid_last_event_id')
      }
      // An id past anything this log has given (another server's, say) would wait in silence: refused.
      for (const headers of [{ 'last-event-id': '99999999999' }, {}] as Array<Record<string, string>>) {
        const path = `/api/projects/${projectId}/events${'last-event-id' in headers ? '' : '?after=99999999999'}`
        const past = await server.request('GET', path, { token: alice.token, headers })
        expect([past.status, past.body.code]).toEqual([400, 'invalid_last_event_id'])
      }
    })

    it('gives a conversation stream only that conversation’s events', async () => {
      const projectId = await newProject()
      const one = await newConversation(projectId, 'one')
      const two = await newConversation(projectId, 'two')
      const stream = await openSse(`${server.url}/api/conversations/${one}/events`, { token: alice.token })
      await server.request('PATCH', `/api/conversations/${two}`, { token: alice.token, body: { title: 'two!' } })
      await server.request('PATCH', `/api/conversations/${one}`, { token: alice.token, body: { title: 'one!' } })
      const events = await stream.waitFor(2)
      expect(events.map((event) => [event.event, event.data.conversation.id])).toEqual([
        ['conversation.created', one],
        ['conversation.updated', one],
      ])
      stream.close()
    })

    it('keeps delivering to other clients while one client does not read at all', async () => {
      const projectId = await newProject()
      // A client that sends the request and never reads: its socket buffers fill up.
      const { port } = new URL(server.url)
      const stalled = connect({ port: Number(port), host: '127.0.0.1' })
      stalled.write(
        `GET /api/projects/${projectId}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${alice.token}\r\nAccept: text/event-stream\r\n\r\n`,
      )
      stalled.pause()
      const healthy = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: alice.token })
      await healthy.waitFor(1)
      const long = 'x'.repeat(8000)
      const total = 150
      for (let index = 0; index < total; index++) {
        await server.request('PATCH', `/api/projects/${projectId}`, {
          token: alice.token,
          body: { description: `${index}${long}` },
        })
      }
      const events = await healthy.waitFor(total + 1, 15_000)
      expect(events.at(-1)!.data.project.description.startsWith(String(total - 1))).toBe(true)
      healthy.close()
      stalled.destroy()
    })
  })
}

describe('SSE shutdown', () => {
  it('ends open streams with a final shutdown event when the server closes', async () => {
    const store = await openTestStore('pglite')
    const server = await startTestServer(store)
    try {
      const user = await server.createUser()
      const projectId = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 's' } })).body
        .id
      const stream = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: user.token })
      await stream.waitFor(1)
      await server.close()
      await stream.ended
      expect(stream.events.at(-1)).toMatchObject({ event: 'shutdown', id: undefined })
    } finally {
      await server.close().catch(() => undefined)
      await store.close()
    }
  })
})

describe.runIf(testEngines().includes('postgres'))('SSE across server instances on one Postgres', () => {
  let database: TestDatabase
  let storeA: Store
  let storeB: Store
  let serverA: TestServer
  let serverB: TestServer

  beforeAll(async () => {
    database = await createTestDatabase('postgres')
    storeA = await database.open()
    storeB = await database.open()
    serverA = await startTestServer(storeA)
    serverB = await startTestServer(storeB)
  })
  afterAll(async () => {
    await serverA?.close()
    await serverB?.close()
    await storeA?.close()
    await storeB?.close()
    await database?.drop()
  })

  it('delivers live to a client of instance A what a client of instance B wrote', async () => {
    const user = await serverA.createUser()
    const projectId = (await serverA.request('POST', '/api/projects', { token: user.token, body: { name: 'x' } })).body
      .id
    const stream = await openSse(`${serverA.url}/api/projects/${projectId}/events`, { token: user.token })
    await stream.waitFor(1)
    const conversation = await serverB.request('POST', `/api/projects/${projectId}/conversations`, {
      token: user.token,
      body: { title: 'from B' },
    })
    const events = await stream.waitFor(2)
    expect(events[1]).toMatchObject({
      event: 'conversation.created',
      data: { conversation: { id: conversation.body.id, title: 'from B' } },
    })
    stream.close()
  })
})
