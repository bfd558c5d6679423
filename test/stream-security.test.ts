import type { Socket } from 'node:net'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { appendEvents, kvSet, openStore, revokeToken, type Store } from '../src/store/index.js'
import { createTestDatabase, openTestStore, apiEngines, type TestDatabase } from './helpers/engines.js'
import { openSse } from './helpers/sse-client.js'
import { metricValue, openStalledStream, type StalledClient } from './helpers/stalled-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitFor, within } from './helpers/waits.js'

setFlagsFromString('--expose_gc')
const gc = runInNewContext('gc') as () => void

const adminToken = 'admin-secret-0123456789'
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
const until = async (check: () => Promise<boolean> | boolean, timeoutMs: number, what: string): Promise<void> => {
  await waitFor(check, { timeoutMs, what, intervalMs: 50 })
}

async function heapAfterGc(): Promise<number> {
  for (let round = 0; round < 4; round++) {
    gc()
    // Not a wait for a state: a pause between collections lets finalizers and weak refs run.
    await sleep(50)
  }
  return process.memoryUsage().heapUsed
}

describe('stalled streams do not pin memory', () => {
  let store: Store
  let server: TestServer
  let alice: TestUser
  let conversationId: string

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { streams: { drainTimeoutMs: 60_000, maxPerToken: 100 } })
    alice = await server.createUser()
    const project = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'big' } })).body
    const conversation = (
      await server.request('POST', `/api/projects/${project.id}/conversations`, { token: alice.token, body: {} })
    ).body
    conversationId = conversation.id
    // 300 events of 100 KB each: 30 MB a reader could hold if nothing bounded it.
    const blob = 'x'.repeat(100_000)
    for (let batch = 0; batch < 30; batch++) {
      await store.transaction((tx) =>
        appendEvents(
          tx,
          Array.from({ length: 10 }, (_, index) => ({
            type: 'test.large',
            projectId: project.id,
            conversationId,
            userId: alice.user.id,
            data: { index: batch * 10 + index, blob },
          })),
        ),
      )
    }
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  const openStreams = async (): Promise<number> =>
    metricValue((await server.request('GET', '/metrics')).body as string, 'plinth_sse_streams')

  it('releases 50 streams that stopped reading and then disconnected: heap back within 50 MB of its baseline', async () => {
    // Warm up every code path once, so the baseline includes what stays loaded anyway.
    const warm = await openStalledStream(server.url, `/api/conversations/${conversationId}/events`, alice.token)
    warm.socket.destroy()
    await until(async () => (await openStreams()) === 0, 10_000, 'the warm-up stream to end')
    const baseline = await heapAfterGc()

    // The server's side of each connection, to see its writes back up.
    const serverSockets = new Map<number, Socket>()
    const track = (socket: Socket): void => void serverSockets.set(socket.remotePort ?? 0, socket)
    server.app.server.on('connection', track)
    const clients: StalledClient[] = []
    try {
      for (let index = 0; index < 50; index++)
        clients.push(await openStalledStream(server.url, `/api/conversations/${conversationId}/events`, alice.token))
    } finally {
      server.app.server.off('connection', track)
    }
    await until(async () => (await openStreams()) === 50, 10_000, '50 open streams')
    // Every stream fills its socket and blocks on a write that will not drain.
    await until(
      () => clients.every((client) => serverSockets.get(client.socket.localPort ?? -1)?.writableNeedDrain === true),
      30_000,
      'every stream to block on a write its client does not read',
    )
    for (const client of clients) client.socket.destroy()
    await until(async () => (await openStreams()) === 0, 10_000, 'every stream to end after its client left')

    const after = await heapAfterGc()
    expect((after - baseline) / 1024 / 1024).toBeLessThan(50)
  })

  it('drops a client that stopped reading but stays connected, once it has not drained within the bound', async () => {
    const strict = await startTestServer(store, { streams: { drainTimeoutMs: 300 } })
    try {
      const client = await openStalledStream(strict.url, `/api/conversations/${conversationId}/events`, alice.token)
      const metrics = async (): Promise<string> => (await strict.request('GET', '/metrics')).body as string
      // The server ends the stream itself; the client does nothing (a paused socket does not even see the close).
      await until(
        async () => metricValue(await metrics(), 'plinth_sse_streams_ended_total', '{reason="slow_consumer"}') === 1,
        5000,
        'the stalled client to be dropped',
      )
      expect(metricValue(await metrics(), 'plinth_sse_streams')).toBe(0)
      client.socket.resume()
      await client.closed
    } finally {
      await strict.close()
    }
  })
})

for (const engine of apiEngines()) {
  describe(`stream limits and access on ${engine}`, () => {
    let database: TestDatabase
    let store: Store
    let server: TestServer
    let owner: TestUser
    let member: TestUser

    beforeAll(async () => {
      database = await createTestDatabase(engine)
      store = await database.open()
      server = await startTestServer(store, {
        adminToken,
        plugins: ['rdm'],
        streams: { maxPerToken: 3, maxTotal: 6, maxLifetimeMs: 60_000, recheckIntervalMs: 300 },
      })
      owner = await server.createUser()
      member = await server.createUser()
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
      await database?.drop()
    })

    const newProject = async (user: TestUser = owner): Promise<string> =>
      (
        await server.request('POST', '/api/projects', {
          token: user.token,
          body: { name: 'watched', description: 'before' },
        })
      ).body.id
    /** Dispatches as a button click, approving the confirmation if one is asked. */
    const command = async (user: TestUser, id: string, projectId: string, params: object): Promise<number> => {
      const answer = await server.request('POST', `/api/commands/${id}`, {
        token: user.token,
        body: { entrance: 'button', projectId, params },
      })
      if (answer.status !== 202) return answer.status
      const decided = await server.request('POST', `/api/decisions/${answer.body.decision.id}`, {
        token: user.token,
        body: { decision: 'approve' },
      })
      return decided.body.dispatch?.status === 'succeeded' ? 200 : decided.status
    }

    it('caps open streams per token and in total with 429 too_many_streams', async () => {
      const projectId = await newProject()
      const path = `${server.url}/api/projects/${projectId}/events`
      const held = await Promise.all([1, 2, 3].map(() => openSse(path, { token: owner.token })))
      expect(held.map((stream) => stream.status)).toEqual([200, 200, 200])
      const refused = await server.request('GET', `/api/projects/${projectId}/events`, { token: owner.token })
      expect(refused.status).toBe(429)
      expect(refused.headers.get('content-type')).toMatch(/problem\+json/)
      expect(refused.body).toMatchObject({ code: 'too_many_streams', limit: 3 })
      // Another token of the same server still gets in, until the total is reached.
      const others = await Promise.all(
        [1, 2, 3].map(async () =>
          openSse(`${server.url}/api/projects/${await newProject(member)}/events`, { token: member.token }),
        ),
      )
      expect(others.map((stream) => stream.status)).toEqual([200, 200, 200])
      const third = await server.createUser()
      const full = await server.request('GET', `/api/projects/${await newProject(third)}/events`, {
        token: third.token,
      })
      expect(full.status).toBe(429)
      expect(full.body).toMatchObject({ code: 'too_many_streams', limit: 6 })
      // A closed stream frees its place.
      held[0]!.close()
      await until(
        async () =>
          (await openSse(path, { token: owner.token }).then((stream) => (stream.close(), stream.status))) === 200,
        5000,
        'a freed place',
      )
      for (const stream of [...held, ...others]) stream.close()
    })

    it('ends a stream with access_revoked when its token is revoked', async () => {
      const user = await server.createUser()
      const projectId = await newProject(user)
      const stream = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: user.token })
      await stream.waitFor(1)
      const revoked = await server.request('DELETE', `/api/admin/tokens/${user.tokenId}`, { token: adminToken })
      expect(revoked.status).toBe(204)
      await stream.ended
      expect(stream.events.at(-1)).toMatchObject({ event: 'access_revoked', data: { code: 'access_revoked' } })
    })

    it('ends a stream with access_revoked when its user is disabled', async () => {
      const user = await server.createUser()
      const projectId = await newProject(user)
      const stream = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: user.token })
      await stream.waitFor(1)
      expect(
        (
          await server.request('PATCH', `/api/admin/users/${user.user.id}`, {
            token: adminToken,
            body: { disabled: true },
          })
        ).status,
      ).toBe(200)
      await stream.ended
      expect(stream.events.at(-1)?.event).toBe('access_revoked')
    })

    it('ends a removed member’s streams before the owner’s next change reaches them', async () => {
      const projectId = await newProject()
      expect(await command(owner, 'rdm.member.add', projectId, { userId: member.user.id })).toBe(200)
      const conversation = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: member.token, body: {} })
      ).body
      const projectStream = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: member.token })
      const conversationStream = await openSse(`${server.url}/api/conversations/${conversation.id}/events`, {
        token: member.token,
      })
      await projectStream.waitFor(1)
      await conversationStream.waitFor(1)
      expect(await command(owner, 'rdm.member.remove', projectId, { userId: member.user.id })).toBe(200)
      await Promise.all([projectStream.ended, conversationStream.ended])
      expect(projectStream.events.at(-1)?.event).toBe('access_revoked')
      expect(conversationStream.events.at(-1)?.event).toBe('access_revoked')
      await server.request('PATCH', `/api/projects/${projectId}`, {
        token: owner.token,
        body: { description: 'the owner’s secret plans' },
      })
      expect(JSON.stringify(projectStream.events)).not.toContain('secret plans')
    })

    it('re-checks shared streams periodically, for adapters that do not announce a change', async () => {
      const projectId = await newProject()
      await command(owner, 'rdm.member.add', projectId, { userId: member.user.id })
      const stream = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: member.token })
      await stream.waitFor(1)
      // The member table changes behind the adapter's back: no announcement.
      await kvSet(store, 'rdm', `members:${projectId}`, [])
      await within(stream.ended, 5000, 'the periodic re-check ending the stream')
      expect(stream.events.at(-1)?.event).toBe('access_revoked')
    })

    it('ends streams when their project is deleted', async () => {
      const projectId = await newProject()
      await command(owner, 'rdm.member.add', projectId, { userId: member.user.id })
      const stream = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: member.token })
      await stream.waitFor(1)
      expect((await server.request('DELETE', `/api/projects/${projectId}`, { token: owner.token })).status).toBe(204)
      await stream.ended
      expect(stream.events.at(-1)?.event).toBe('access_revoked')
    })

    if (engine === 'postgres') {
      it('ends a stream when another process revokes the token (NOTIFY crosses instances)', async () => {
        const user = await server.createUser()
        const projectId = await newProject(user)
        const stream = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: user.token })
        await stream.waitFor(1)
        const other = await openStore({ databaseUrl: database.url!, poolSize: 1 })
        try {
          await revokeToken(other, user.tokenId)
        } finally {
          await other.close()
        }
        await stream.ended
        expect(stream.events.at(-1)?.event).toBe('access_revoked')
      })
    }

    it('ends a stream at its maximum lifetime with reconnect; Last-Event-ID continues exactly there', async () => {
      const short = await startTestServer(store, { streams: { maxLifetimeMs: 400 } })
      try {
        const projectId = await newProject()
        const first = await openSse(`${short.url}/api/projects/${projectId}/events`, { token: owner.token })
        await first.ended
        const final = first.events.at(-1)!
        expect(final).toMatchObject({ event: 'reconnect', data: { reason: 'max_lifetime' } })
        expect(final.id).toBeUndefined()
        const lastId = first.events.at(-2)!.id!
        expect(final.data.lastEventId).toBe(Number(lastId))
        await server.request('PATCH', `/api/projects/${projectId}`, { token: owner.token, body: { name: 'renamed' } })
        const second = await openSse(`${short.url}/api/projects/${projectId}/events`, {
          token: owner.token,
          lastEventId: lastId,
        })
        const [next] = await second.waitFor(1)
        expect(next).toMatchObject({ event: 'project.updated' })
        second.close()
      } finally {
        await short.close()
      }
    })
  })
}
