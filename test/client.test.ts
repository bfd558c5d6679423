import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createClient, PlinthError, type PlinthClient, type RunEvent, type StreamState } from '../src/client/index.js'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { CuttableProxy } from './helpers/cuttable-proxy.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// plinth/client against a real listening server (docs/client.md). The console's
// Chromium tests run the same modules in a browser (test/console-browser.test.ts).

const words = Array.from({ length: 60 }, (_, index) => `w${index}`)

/** Reads a run's events to their end; `onEvent` may act on each (answer a decision, cut the network). */
async function collect(
  events: AsyncIterable<RunEvent>,
  onEvent: (event: RunEvent) => void | Promise<void> = () => {},
): Promise<RunEvent[]> {
  const seen: RunEvent[] = []
  for await (const event of events) {
    seen.push(event)
    await onEvent(event)
  }
  return seen
}
const textOf = (events: RunEvent[]): string =>
  events.flatMap((event) => (event.event === 'message.delta' ? [event.data.text] : [])).join('')

for (const engine of apiEngines()) {
  describe(`plinth/client on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let model: ScriptedModel
    let alice: TestUser
    let client: PlinthClient
    let projectId: string
    let proxy: CuttableProxy

    beforeAll(async () => {
      store = await openTestStore(engine)
      model = new ScriptedModel({ id: 'scripted', turns: [] })
      server = await startTestServer(store, { models: [model], plugins: ['rdm'] })
      alice = await server.createUser()
      client = createClient({ baseUrl: server.url, token: alice.token })
      projectId = (await client.projects.create({ name: 'client' })).id
      proxy = new CuttableProxy(Number(new URL(server.url).port))
      await proxy.listen()
    })
    afterAll(async () => {
      await proxy?.close()
      await server?.close()
      await store?.close()
    })

    it('gives typed resources, and problem+json as a PlinthError with its stable code', async () => {
      const project = await client.projects.get(projectId)
      expect(project).toMatchObject({ id: projectId, name: 'client' })
      const renamed = await client.projects.update(projectId, { description: 'typed' })
      expect(renamed.description).toBe('typed')
      expect((await client.projects.list({ limit: 5 })).items.map((item) => item.id)).toContain(projectId)
      const conversation = await client.conversations.create(projectId, { title: 'first' })
      expect((await client.conversations.list(projectId)).items.map((item) => item.id)).toContain(conversation.id)
      expect((await client.me()).id).toBe(alice.user.id)

      const missing = await client.projects.get('01J00000000000000000000000').catch((error: unknown) => error)
      expect(missing).toBeInstanceOf(PlinthError)
      expect(missing).toMatchObject({ status: 404, code: 'not_found' })
      const invalid = await client.projects.create({ name: '' }).catch((error: unknown) => error)
      expect(invalid).toMatchObject({ status: 400, code: 'validation_failed', problem: { errors: expect.any(Array) } })
      const refused = await createClient({ baseUrl: server.url, token: 'plt_wrong' })
        .me()
        .catch((error: unknown) => error)
      expect(refused).toMatchObject({ status: 401, code: 'unauthorized' })
      const down = await createClient({ baseUrl: 'http://127.0.0.1:9', token: alice.token })
        .me()
        .catch((error: unknown) => error)
      expect(down).toMatchObject({ status: 0, code: 'unreachable' })
    })

    it('runs.start streams a run to its end: the exact text, one run.created first, the terminal event last', async () => {
      model.setTurns([{ text: 'Hello from the typed client.' }])
      const conversation = await client.conversations.create(projectId)
      const events = await collect(client.runs.start(conversation.id, { input: 'hi' }))
      expect(events[0]?.event).toBe('run.created')
      expect(events.at(-1)?.event).toBe('run.completed')
      expect(textOf(events)).toBe('Hello from the typed client.')
      // The same run read again from its log: the same events, and the stream ends by itself.
      const runId = events[0]!.event === 'run.created' ? events[0]!.data.run.id : ''
      const replayed = await collect(client.runs.stream(runId))
      expect(replayed.map((event) => event.id)).toEqual(events.map((event) => event.id))
      // After the last id there is nothing more: the iteration ends at once.
      expect(await collect(client.runs.stream(runId, { after: events.at(-1)!.id }))).toEqual([])
    })

    it('runs.create and runs.wait: a run waited for until it ends, and create-and-wait', async () => {
      model.setTurns([{ text: words.slice(0, 10).join(' '), delayMs: 30 }])
      const conversation = await client.conversations.create(projectId)
      const created = await client.runs.create(conversation.id, { input: 'slowly' })
      expect(['queued', 'running']).toContain(created.status)
      const done = await client.runs.wait(created.id)
      expect(done).toMatchObject({ id: created.id, status: 'completed' })

      model.setTurns([{ text: 'Waited.' }])
      const waited = await client.runs.create(conversation.id, { input: 'again' }, { wait: 30 })
      expect(waited.status).toBe('completed')
      expect(waited.messages.at(-1)?.content).toBe('Waited.')
    })

    it('a decision and a client tool: answered through decisions.answer and toolOutputs.submit, the stream goes on', async () => {
      model.setTurns([
        { toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'From the client', body: 'approved' } }] },
        { toolCalls: [{ name: 'pick_color', arguments: { from: ['red', 'blue'] } }] },
        { text: 'Written, in blue.' },
      ])
      const conversation = await client.conversations.create(projectId)
      const clientTools = [
        {
          name: 'pick_color',
          description: 'Ask for a color',
          parameters: { type: 'object', properties: { from: { type: 'array', items: { type: 'string' } } } },
        },
      ]
      let runId = ''
      const events = await collect(
        client.runs.start(conversation.id, { input: 'write it', clientTools }),
        async (event) => {
          if (event.event === 'run.created') runId = event.data.run.id
          if (event.event !== 'run.status' || event.data.status !== 'requires_action') return
          for (const decision of event.data.requiredAction?.decisions ?? [])
            await client.decisions.answer(decision.decisionId, { decision: 'approve' })
          const calls = event.data.requiredAction?.toolOutputs ?? []
          if (calls.length > 0)
            await client.toolOutputs.submit(
              runId,
              calls.map((call) => ({ callId: call.callId, output: { color: 'blue' } })),
            )
        },
      )
      expect(events.map((event) => event.event)).toEqual(
        expect.arrayContaining(['decision.required', 'decision.resolved', 'tool_call.completed']),
      )
      expect(events.at(-1)?.event).toBe('run.completed')
      expect(textOf(events)).toBe('Written, in blue.')
      expect((await client.decisions.list({ status: 'approved' })).items.length).toBeGreaterThan(0)
    })

    for (const tickets of [false, true]) {
      it(
        `reconnects after the network drops mid-run, with ${tickets ? 'stream tickets (as in a browser)' : 'the bearer header'}: no text lost or doubled`,
        { timeout: 90_000 },
        async () => {
          model.setTurns([{ text: words.join(' '), delayMs: 25 }])
          const conversation = await client.conversations.create(projectId)
          const cut = createClient({
            baseUrl: `http://127.0.0.1:${proxy.port}`,
            token: alice.token,
            streamTickets: tickets,
            reconnect: { initialDelayMs: 100 },
          })
          const states: StreamState[] = []
          let dropped = false
          const events = await collect(
            cut.runs.start(conversation.id, { input: 'a long one' }, { onState: (state) => states.push(state) }),
            (event) => {
              if (!dropped && event.event === 'message.delta' && event.data.text.includes('w10')) {
                dropped = true
                proxy.drop(300)
              }
            },
          )
          expect(dropped).toBe(true)
          expect(states).toContain('reconnecting')
          expect(textOf(events)).toBe(words.join(' '))
          const ids = events.map((event) => Number(event.id))
          expect(ids).toEqual([...ids].sort((a, b) => a - b))
          expect(new Set(ids).size).toBe(ids.length)
          expect(events.at(-1)?.event).toBe('run.completed')
        },
      )
    }

    it(
      'conversation events follow live until the caller stops; a revoked token ends the stream with access_revoked',
      { timeout: 60_000 },
      async () => {
        const bob = await server.createUser()
        const bobs = createClient({ baseUrl: server.url, token: bob.token })
        const project = await bobs.projects.create({ name: 'bob' })
        const conversation = await bobs.conversations.create(project.id)
        model.setTurns([{ text: 'Seen live.' }])
        const stop = new AbortController()
        const seen: string[] = []
        const following = (async () => {
          for await (const event of bobs.conversations.events(conversation.id, { signal: stop.signal })) {
            seen.push(event.event)
            if (event.event === 'run.completed') stop.abort()
          }
        })()
        await bobs.runs.create(conversation.id, { input: 'go' })
        await following
        expect(seen).toContain('run.completed')

        const revoked = (async () => {
          for await (const event of bobs.conversations.events(conversation.id, { after: 0 })) {
            if (event.event === 'run.completed') await server.revoke(bob)
          }
        })()
        await expect(revoked).rejects.toMatchObject({ code: 'access_revoked' })
      },
    )

    it('knowledge.upload takes text or a file; search finds it; commands dispatch through the bus', async () => {
      const text = await client.knowledge.upload(projectId, {
        title: 'Runbook',
        text: 'Restart the flux capacitor with care.',
      })
      expect(text).toMatchObject({ title: 'Runbook' })
      const file = await client.knowledge.upload(projectId, {
        file: new Blob(['# Pager\n\nThe pager rotation changes on Mondays.'], { type: 'text/markdown' }),
        filename: 'pager.md',
      })
      expect(file.id).toBeTruthy()
      for (let deadline = Date.now() + 30_000; (await client.knowledge.get(file.id)).ingestStatus !== 'ready';) {
        if (Date.now() > deadline) throw new Error('the file never became ready')
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      const hits = await client.search({ projectId, q: 'flux capacitor' })
      expect(hits.items[0]?.title).toBe('Runbook')
      expect((await client.search({ q: 'pager rotation' })).items.map((hit) => hit.title)).toContain('pager')

      const commands = await client.commands.list()
      expect(commands.items.map((command) => command.id)).toContain('rdm.ping')
      const pinged = await client.commands.dispatch('rdm.ping', {
        entrance: 'button',
        projectId,
        params: { target: 'db-1' },
      })
      expect(pinged).toMatchObject({ status: 'succeeded', result: { pong: true } })
    })
  })
}

// What goes wrong between the client and the server, played by a `fetch` of the test's own in front of
// the real one: each case must end (with the run followed, or a clear error), never loop.
describe('plinth/client when the network or a proxy misbehaves', () => {
  let store: Store
  let server: TestServer
  let model: ScriptedModel
  let alice: TestUser
  let projectId: string

  beforeAll(async () => {
    store = await openTestStore('pglite')
    model = new ScriptedModel({ id: 'scripted', turns: [] })
    server = await startTestServer(store, { models: [model] })
    alice = await server.createUser()
    projectId = (await createClient({ baseUrl: server.url, token: alice.token }).projects.create({ name: 'faults' })).id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  /** A stream body that fails at once, as a connection cut right after the headers. */
  const cutBody = (): ReadableStream<Uint8Array> =>
    new ReadableStream({ start: (controller) => controller.error(new TypeError('terminated')) })

  it('a POST whose stream is cut before run.created is sent again with the same Idempotency-Key: one run, followed to its end', async () => {
    model.setTurns([{ text: 'Only once.' }])
    const keys: string[] = []
    let posts = 0
    const fetchWithCut: typeof fetch = async (input, init) => {
      const request = new Request(input, init)
      if (request.method === 'POST' && request.url.endsWith('/runs')) {
        keys.push(request.headers.get('idempotency-key') ?? '')
        if (posts++ === 0) {
          const real = await fetch(request)
          await real.body?.cancel()
          return new Response(cutBody(), { status: 201, headers: { 'content-type': 'text/event-stream' } })
        }
      }
      return fetch(request)
    }
    const client = createClient({
      baseUrl: server.url,
      token: alice.token,
      fetch: fetchWithCut,
      reconnect: { initialDelayMs: 50 },
    })
    const conversation = await client.conversations.create(projectId)
    const events = await collect(client.runs.start(conversation.id, { input: 'once' }))
    expect(posts).toBe(2)
    expect(keys[0]).toMatch(/^plinth-client-/)
    expect(keys[1]).toBe(keys[0])
    expect(textOf(events)).toBe('Only once.')
    expect(events.filter((event) => event.event === 'run.created')).toHaveLength(1)
    expect((await client.conversations.runs(conversation.id)).items).toHaveLength(1)
  })

  it('a stream answered with a page that is not an event stream fails with invalid_stream instead of reconnecting for ever', async () => {
    let opened = 0
    const proxyPage: typeof fetch = async (input, init) => {
      const request = new Request(input, init)
      if (request.url.includes('/events')) {
        opened++
        return new Response('<html>maintenance</html>', { status: 200, headers: { 'content-type': 'text/html' } })
      }
      return fetch(request)
    }
    const client = createClient({ baseUrl: server.url, token: alice.token, fetch: proxyPage })
    const conversation = await client.conversations.create(projectId)
    const read = collect(client.conversations.events(conversation.id) as AsyncIterable<RunEvent>)
    await expect(read).rejects.toMatchObject({ code: 'invalid_stream', status: 200 })
    expect(opened).toBe(1)
    // And a 2xx that is not JSON on a call is a PlinthError too.
    const notJson = createClient({
      baseUrl: server.url,
      token: alice.token,
      fetch: async () => new Response('<html/>', { status: 200 }),
    })
    await expect(notJson.me()).rejects.toMatchObject({ code: 'invalid_response' })
  })

  it('aborting inside the loop hands out no further event, and an error thrown by onState reaches the caller', async () => {
    model.setTurns([{ text: 'one two three four five six' }])
    const client = createClient({ baseUrl: server.url, token: alice.token })
    const conversation = await client.conversations.create(projectId)
    const run = await client.runs.create(conversation.id, { input: 'count' })
    await client.runs.wait(run.id)
    const stop = new AbortController()
    const seen: string[] = []
    for await (const event of client.runs.stream(run.id, { signal: stop.signal })) {
      seen.push(event.event)
      stop.abort()
    }
    expect(seen).toEqual(['run.created'])

    const throwing = collect(
      client.runs.stream(run.id, {
        onState: (state) => {
          if (state === 'live') throw new Error('status line broke')
        },
      }),
    )
    await expect(throwing).rejects.toThrow('status line broke')
  })
})
