import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { redactUrl } from '../src/app/logger.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// Browsers' EventSource cannot send Authorization: a single-use, short-lived ticket opens one stream.
describe('stream tickets (EventSource without a header)', () => {
  let store: Store
  let server: TestServer
  let alice: TestUser
  let mallory: TestUser
  let projectId: string

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store)
    alice = await server.createUser()
    mallory = await server.createUser()
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'tickets' } })).body
      .id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  const ticketFor = async (user: TestUser, path: string) =>
    server.request('POST', '/api/stream-tickets', { token: user.token, body: { path } })
  /** Opens a stream with no Authorization header, as EventSource does; the status and the first chunk. */
  const open = async (url: string): Promise<{ status: number; first: string }> => {
    const controller = new AbortController()
    const response = await fetch(`${server.url}${url}`, {
      headers: { accept: 'text/event-stream' },
      signal: controller.signal,
    })
    let first = ''
    if (response.ok && response.body) {
      const reader = response.body.getReader()
      first = new TextDecoder().decode((await reader.read()).value)
    } else first = await response.text()
    controller.abort()
    return { status: response.status, first }
  }

  it('opens the stream it was issued for, once', async () => {
    const path = `/api/projects/${projectId}/events`
    const issued = await ticketFor(alice, path)
    expect(issued.status).toBe(201)
    expect(issued.body.ticket).toMatch(/^pst_/)
    expect(issued.body.url).toBe(`${path}?ticket=${encodeURIComponent(issued.body.ticket)}`)
    const stream = await open(issued.body.url)
    expect(stream.status).toBe(200)
    expect(stream.first).toMatch(/event: project\.created/)
    const again = await open(issued.body.url)
    expect(again.status).toBe(401)
  })

  it('is refused on another path, on a non-stream route, and when its token is revoked', async () => {
    const other = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'other' } })).body
      .id
    const issued = await ticketFor(alice, `/api/projects/${projectId}/events`)
    expect((await open(`/api/projects/${other}/events?ticket=${issued.body.ticket}`)).status).toBe(401)
    const another = await ticketFor(alice, `/api/projects/${projectId}/events`)
    const me = await fetch(`${server.url}/api/me?ticket=${another.body.ticket}`)
    expect(me.status).toBe(401)
    const short = await server.createUser()
    const revoked = await ticketFor(short, `/api/projects/${projectId}/events`)
    await server.revoke(short)
    expect((await open(revoked.body.url)).status).toBe(401)
  })

  it('grants nothing the token could not see: a stranger’s ticket for Alice’s project streams 404', async () => {
    const issued = await ticketFor(mallory, `/api/projects/${projectId}/events`)
    expect(issued.status).toBe(201)
    expect((await open(issued.body.url)).status).toBe(404)
  })

  it('only for event streams, and never logged', async () => {
    const bad = await ticketFor(alice, `/api/projects/${projectId}`)
    expect(bad.status).toBe(400)
    expect(bad.body.code).toBe('validation_failed')
    expect(redactUrl('/api/runs/X/events?ticket=pst_abcdefghijkl&after=3')).toBe(
      '/api/runs/X/events?ticket=[redacted]&after=3',
    )
  })
})
