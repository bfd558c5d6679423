import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { OpenAIChatModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { testDb } from '../src/store/test-access.js'
import { openTestStore } from './helpers/engines.js'
import { openaiTextChunks, startFakeUpstream, type FakeUpstream } from './helpers/fake-upstream.js'
import { openSse } from './helpers/sse-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// How an answer's text reaches the client (docs/guides/agent-runs.md#streaming-the-answer): the first
// text at once, unless the whole answer is already in; then it goes out with the turn's end.
describe('answer deltas', () => {
  let store: Store
  let server: TestServer
  let upstream: FakeUpstream
  let alice: TestUser
  let projectId: string

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      models: [
        new OpenAIChatModel({
          id: 'gpt',
          model: 'gpt-test',
          baseUrl: `${upstream.url}/v1`,
          apiKey: 'sk-test-secret-key-0123456789',
          contextWindow: 100_000,
          supportsTools: true,
          idleTimeoutMs: 120_000,
        }),
      ],
    })
    alice = await server.createUser()
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'deltas' } })).body
      .id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
    await upstream?.close()
  })

  const startRun = async () => {
    const conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id as string
    const stream = await openSse(`${server.url}/api/conversations/${conversationId}/events`, { token: alice.token })
    const answer = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: { input: 'hello', model: 'gpt' },
    })
    expect(answer.status, JSON.stringify(answer.body)).toBe(201)
    return { runId: answer.body.id as string, stream }
  }

  it('an answer that arrives whole goes out as one message.delta, committed with the turn', async () => {
    const text = 'Bonjour, voici la réponse entière en une fois.'
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks(text, 6), whole: true })
    const { runId, stream } = await startRun()
    try {
      await stream.waitForEvent((event) => event.event === 'run.completed', { what: 'run.completed' })
      const names = stream.events.map((event) => event.event)
      const deltas = stream.events.filter((event) => event.event === 'message.delta')
      expect(deltas.map((event) => event.data.text)).toEqual([text])
      expect(names.indexOf('message.delta')).toBeLessThan(names.lastIndexOf('message.completed'))
      // The delta and the message's completion were written by one statement: adjacent ids.
      const stored = await testDb(store)
        .selectFrom('events')
        .select(['id', 'type'])
        .where('run_id', '=', runId)
        .orderBy('id')
        .execute()
      const at = stored.findIndex((row) => row.type === 'message.delta')
      expect(stored[at + 1]?.type).toBe('message.completed')
      expect(Number(stored[at + 1]!.id) - Number(stored[at]!.id)).toBe(1)
    } finally {
      stream.close()
    }
  })

  it('the first text of an answer still streaming goes out at once, before the rest arrives', async () => {
    // The upstream sends its role frame and the first piece of text, then nothing until the run is cancelled.
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: openaiTextChunks('First piece, then a long wait.', 4),
      stallAfter: 2,
    })
    const { runId, stream } = await startRun()
    try {
      const delta = await stream.waitForEvent((event) => event.event === 'message.delta', {
        what: 'the first message.delta',
        timeoutMs: 30_000,
      })
      expect(delta.data.text).toBe('First pi')
      expect(
        stream.events.some(
          (event) => event.event === 'message.completed' && event.data.messageId === delta.data.messageId,
        ),
      ).toBe(false)
    } finally {
      await server.request('POST', `/api/runs/${runId}/cancel`, { token: alice.token })
      stream.close()
    }
  })
})
