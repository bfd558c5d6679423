import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

for (const engine of apiEngines()) {
  describe(`finding runs and create-and-wait on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let model: ScriptedModel
    let alice: TestUser
    let projectId: string

    beforeAll(async () => {
      store = await openTestStore(engine)
      model = new ScriptedModel({ id: 'scripted', turns: [] })
      server = await startTestServer(store, { plugins: ['rdm'], models: [model] })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'runs' } })).body
        .id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const newConversation = async (): Promise<string> =>
      (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body
        .id

    it('?wait=true answers when the run is done, with its messages', async () => {
      const conversationId = await newConversation()
      model.setTurns([{ text: 'All done here.' }])
      const answer = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
        token: alice.token,
        body: { input: 'hello' },
      })
      expect(answer.status).toBe(201)
      expect(answer.body).toMatchObject({ status: 'completed', conversationId })
      expect(
        answer.body.messages.map((message: { role: string; content: string }) => [message.role, message.content]),
      ).toEqual([
        ['user', 'hello'],
        ['assistant', 'All done here.'],
      ])
    })

    it('without a wait the 201 answer is the new run with its messages so far (the user message)', async () => {
      const conversationId = await newConversation()
      model.setTurns([{ text: 'Hi.' }])
      const answer = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'hello there' },
      })
      expect(answer.status).toBe(201)
      // The run may already have answered by then: the user message comes first either way.
      expect(answer.body.messages[0]).toMatchObject({ role: 'user', content: 'hello there', runId: answer.body.id })
      await server.runs.waitUntilSettled(answer.body.id, 60_000)
    })

    it('Prefer: wait answers when the run needs action, and past the wait with the run as it is and Retry-After', async () => {
      const conversationId = await newConversation()
      model.setTurns([{ toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'T', body: 'B' } }] }])
      const waiting = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'draft it' },
        headers: { prefer: 'wait=10' },
      })
      expect(waiting.status).toBe(201)
      expect(waiting.body.status).toBe('requires_action')
      expect(waiting.body.requiredAction.decisions).toHaveLength(1)

      const slow = await newConversation()
      model.setTurns([{ text: 'slow '.repeat(40), chunks: 40, delayMs: 100 }])
      const started = Date.now()
      const partial = await server.request('POST', `/api/conversations/${slow}/runs`, {
        token: alice.token,
        body: { input: 'take your time' },
        headers: { prefer: 'wait=1' },
      })
      expect(Date.now() - started).toBeLessThan(3000)
      expect(partial.status).toBe(202)
      expect(partial.headers.get('retry-after')).toBe('5')
      expect(partial.body.status).toBe('running')
      await server.request('POST', `/api/runs/${partial.body.id}/cancel`, { token: alice.token })
    })

    it('lists a conversation’s runs newest first, by status, shows the active run, and the caller’s runs across conversations', async () => {
      const conversationId = await newConversation()
      model.setTurns([{ text: 'one' }])
      const first = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
        token: alice.token,
        body: { input: '1' },
      })
      model.setTurns([{ toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'T', body: 'B' } }] }])
      const second = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
        token: alice.token,
        body: { input: '2' },
      })
      expect(second.body.status).toBe('requires_action')

      const list = await server.request('GET', `/api/conversations/${conversationId}/runs`, { token: alice.token })
      expect(list.body.items.map((run: { id: string }) => run.id)).toEqual([second.body.id, first.body.id])
      const completed = await server.request('GET', `/api/conversations/${conversationId}/runs?status=completed`, {
        token: alice.token,
      })
      expect(completed.body.items.map((run: { id: string }) => run.id)).toEqual([first.body.id])
      const paged = await server.request('GET', `/api/conversations/${conversationId}/runs?limit=1`, {
        token: alice.token,
      })
      expect(paged.body.items).toHaveLength(1)
      const rest = await server.request(
        'GET',
        `/api/conversations/${conversationId}/runs?limit=1&cursor=${paged.body.nextCursor}`,
        { token: alice.token },
      )
      expect(rest.body.items[0].id).toBe(first.body.id)
      expect(
        (await server.request('GET', `/api/conversations/${conversationId}/runs?status=bogus`, { token: alice.token }))
          .status,
      ).toBe(400)

      expect(
        (await server.request('GET', `/api/conversations/${conversationId}`, { token: alice.token })).body.activeRunId,
      ).toBe(second.body.id)
      const everywhere = await server.request('GET', '/api/conversations', { token: alice.token })
      expect(
        everywhere.body.items.find((conversation: { id: string }) => conversation.id === conversationId),
      ).toMatchObject({ activeRunId: second.body.id, projectId })

      const dashboard = await server.request('GET', '/api/runs?status=requires_action', { token: alice.token })
      expect(dashboard.body.items.map((run: { id: string }) => run.id)).toContain(second.body.id)
      expect(dashboard.body.items.every((run: { status: string }) => run.status === 'requires_action')).toBe(true)
      const bob = await server.createUser()
      expect((await server.request('GET', '/api/runs', { token: bob.token })).body.items).toEqual([])
      expect((await server.request('GET', '/api/conversations', { token: bob.token })).body.items).toEqual([])
      expect(
        (await server.request('GET', `/api/conversations/${conversationId}/runs`, { token: bob.token })).status,
      ).toBe(404)

      await server.request('POST', `/api/runs/${second.body.id}/cancel`, { token: alice.token })
      expect(
        (await server.request('GET', `/api/conversations/${conversationId}`, { token: alice.token })).body.activeRunId,
      ).toBeNull()

      // A deleted conversation's runs are no longer listed: they could not be opened.
      const listed = async (): Promise<string[]> =>
        (await server.request('GET', '/api/runs?limit=200', { token: alice.token })).body.items.map(
          (run: { id: string }) => run.id,
        )
      expect(await listed()).toContain(second.body.id)
      expect(
        (await server.request('DELETE', `/api/conversations/${conversationId}`, { token: alice.token })).status,
      ).toBe(204)
      expect((await server.request('GET', `/api/runs/${second.body.id}`, { token: alice.token })).status).toBe(404)
      expect(await listed()).not.toContain(second.body.id)
    })

    it('a finished run’s stream answers 204 to a reconnect, so an EventSource stops reconnecting', async () => {
      const conversationId = await newConversation()
      model.setTurns([{ text: 'done' }])
      const run = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
        token: alice.token,
        body: { input: 'x' },
      })
      const full = await fetch(`${server.url}/api/runs/${run.body.id}/events`, {
        headers: { authorization: `Bearer ${alice.token}`, accept: 'text/event-stream' },
      })
      const text = await full.text()
      const lastId = [...text.matchAll(/^id: (\d+)$/gm)].at(-1)![1]!
      expect(text).toMatch(/event: run\.completed/)
      const again = await fetch(`${server.url}/api/runs/${run.body.id}/events`, {
        headers: { authorization: `Bearer ${alice.token}`, accept: 'text/event-stream', 'last-event-id': lastId },
      })
      expect(again.status).toBe(204)
      // An id this log never gave (another server's) is an error, not "nothing more".
      const foreign = await fetch(`${server.url}/api/runs/${run.body.id}/events?after=99999999999`, {
        headers: { authorization: `Bearer ${alice.token}`, accept: 'text/event-stream' },
      })
      expect([foreign.status, ((await foreign.json()) as { code: string }).code]).toEqual([
        400,
        'invalid_last_event_id',
      ])
    })
  })
}

describe('CORS', () => {
  let store: Store
  let server: TestServer

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { corsOrigins: ['https://app.example'] })
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('answers preflights for listed origins on every route, and gives other origins no CORS headers', async () => {
    const user = await server.createUser()
    for (const path of [
      '/api/projects',
      '/api/conversations/01ARZ3NDEKTSV4RRFFQ69G5FAV/runs',
      '/api/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV/events',
    ]) {
      const preflight = await fetch(`${server.url}${path}`, {
        method: 'OPTIONS',
        headers: {
          origin: 'https://app.example',
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'authorization,content-type',
        },
      })
      expect(preflight.status, path).toBe(204)
      expect(preflight.headers.get('access-control-allow-origin')).toBe('https://app.example')
      expect(preflight.headers.get('access-control-allow-headers')).toMatch(/authorization/)
    }
    const actual = await fetch(`${server.url}/api/me`, {
      headers: { origin: 'https://app.example', authorization: `Bearer ${user.token}` },
    })
    expect(actual.headers.get('access-control-allow-origin')).toBe('https://app.example')
    expect(actual.headers.get('access-control-expose-headers')).toMatch(/x-request-id/)
    const stranger = await fetch(`${server.url}/api/projects`, {
      method: 'OPTIONS',
      headers: { origin: 'https://evil.example', 'access-control-request-method': 'GET' },
    })
    // No CORS header at all for an unlisted origin, and caches told the answer depends on the origin.
    for (const header of [
      'access-control-allow-origin',
      'access-control-allow-methods',
      'access-control-allow-headers',
      'access-control-max-age',
    ])
      expect(stranger.headers.get(header), header).toBeNull()
    const strangerGet = await fetch(`${server.url}/api/me`, {
      headers: { origin: 'https://evil.example', authorization: `Bearer ${user.token}` },
    })
    expect(strangerGet.headers.get('access-control-allow-origin')).toBeNull()
    expect(strangerGet.headers.get('access-control-expose-headers')).toBeNull()
    expect(strangerGet.headers.get('vary')).toMatch(/origin/i)
  })

  it('is off unless origins are listed', async () => {
    const plain = await startTestServer(store)
    try {
      const preflight = await fetch(`${plain.url}/api/projects`, {
        method: 'OPTIONS',
        headers: { origin: 'https://app.example', 'access-control-request-method': 'GET' },
      })
      expect(preflight.headers.get('access-control-allow-origin')).toBeNull()
    } finally {
      await plain.close()
    }
  })
})
