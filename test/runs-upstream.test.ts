import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AnthropicMessagesModel, OpenAIChatModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import {
  anthropicMessageEnd,
  anthropicMessageStart,
  anthropicTextEvents,
  anthropicToolUseEvents,
  openaiChunk,
  openaiTextChunks,
  openaiUsageChunk,
  openaiToolCallChunks,
  startFakeUpstream,
  type FakeUpstream,
} from './helpers/fake-upstream.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { testDb } from '../src/store/test-access.js'

// Runs end to end against a local upstream that speaks the providers' real streaming wire formats.
describe('runs against a fake upstream', () => {
  let store: Store
  let server: TestServer
  let upstream: FakeUpstream
  let alice: TestUser
  let projectId: string

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      plugins: ['rdm'],
      models: [
        new OpenAIChatModel({
          id: 'gpt',
          model: 'gpt-test',
          baseUrl: `${upstream.url}/v1`,
          apiKey: 'sk-test-secret-key-0123456789',
          contextWindow: 100_000,
          supportsTools: true,
          idleTimeoutMs: 500,
        }),
        new AnthropicMessagesModel({
          id: 'claude',
          model: 'claude-test',
          baseUrl: upstream.url,
          apiKey: 'sk-ant-test-secret-0123456789',
          contextWindow: 100_000,
          supportsTools: true,
          idleTimeoutMs: 500,
        }),
      ],
    })
    alice = await server.createUser()
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'upstream' } })).body
      .id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
    await upstream?.close()
  })

  const run = async (model: string): Promise<Record<string, unknown>> => {
    const conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    const response = await fetch(`${server.url}/api/conversations/${conversationId}/runs`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${alice.token}`,
        'content-type': 'application/json',
        accept: 'text/event-stream',
      },
      body: JSON.stringify({ input: 'What is the weather in Paris?', model }),
    })
    await response.text()
    const runs = await testDb(store)
      .selectFrom('runs')
      .select('id')
      .where('conversation_id', '=', conversationId)
      .execute()
    return (await server.request('GET', `/api/runs/${runs[0]!.id}`, { token: alice.token })).body
  }

  it('OpenAI-compatible: tool-call fragments split mid-token are joined, the tool runs, the answer streams', async () => {
    const before = upstream.requests.length
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: openaiToolCallChunks([{ id: 'call_1', name: 'rdm__ping', arguments: '{"target":"Paris"}' }], {
        argumentPieceSize: 6,
      }),
      splitEvery: 7,
    })
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Il fait beau à Paris ☀️.', 20) })
    const finished = await run('gpt')
    expect(finished).toMatchObject({ status: 'completed', iteration: 2 })
    const second = upstream.requests[before + 1]!
    expect(second.body.messages.at(-2)).toMatchObject({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_1', function: { name: 'rdm__ping' } }],
    })
    expect(second.body.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'call_1' })
    expect(JSON.parse(second.body.messages.at(-1).content)).toMatchObject({ pong: true, target: 'Paris' })
    expect(
      upstream.requests[before]!.body.tools.map((tool: { function: { name: string } }) => tool.function.name),
    ).toContain('rdm__ping')
  })

  it('Anthropic: tool_use with input_json_delta, tool_result in a user message', async () => {
    const before = upstream.requests.length
    upstream.enqueue({
      kind: 'anthropic-stream',
      events: [
        anthropicMessageStart(),
        ...anthropicToolUseEvents(0, { id: 'toolu_1', name: 'rdm__ping', arguments: '{"target":"Lyon"}' }),
        ...anthropicMessageEnd('tool_use'),
      ],
    })
    upstream.enqueue({
      kind: 'anthropic-stream',
      events: [
        anthropicMessageStart(),
        ...anthropicTextEvents('Lyon answered.', 4),
        ...anthropicMessageEnd('end_turn'),
      ],
    })
    const finished = await run('claude')
    expect(finished).toMatchObject({ status: 'completed' })
    const second = upstream.requests[before + 1]!
    const last = second.body.messages.at(-1)
    expect(last.role).toBe('user')
    expect(last.content[0]).toMatchObject({ type: 'tool_result', tool_use_id: 'toolu_1' })
  })

  it('retries a 429 with Retry-After before anything streamed', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 429,
      body: { error: { message: 'slow down' } },
      headers: { 'retry-after': '0' },
    })
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('ok', 2) })
    expect(await run('gpt')).toMatchObject({ status: 'completed' })
  })

  const eventsOf = async (runId: string, type: string) =>
    (
      await testDb(store)
        .selectFrom('events')
        .select('data')
        .where('run_id', '=', runId)
        .where('type', '=', type)
        .orderBy('id')
        .execute()
    ).map((row) => (typeof row.data === 'string' ? JSON.parse(row.data) : row.data) as Record<string, unknown>)

  it('a stream cut cleanly before its end fails the run: its text is kept, its usage counted, none of its calls run', async () => {
    // Text and a usage report, then the body ends with neither a finish reason nor [DONE].
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: [openaiChunk({ role: 'assistant', content: 'Partial ans' }), openaiUsageChunk(900, 100)],
      done: false,
    })
    const text = await run('gpt')
    expect(text).toMatchObject({
      status: 'failed',
      error: { code: 'upstream_error' },
      usage: { inputTokens: 900, outputTokens: 100, modelCalls: 1 },
    })
    expect((await eventsOf(text.id as string, 'message.completed')).at(-1)).toMatchObject({
      content: 'Partial ans',
      status: 'failed',
    })
    // A whole call, then one cut mid-arguments: retried (nothing was shown), then failed; nothing ran.
    const cut = {
      kind: 'openai-stream' as const,
      chunks: [
        openaiChunk({
          tool_calls: [
            { index: 0, id: 'c0', type: 'function', function: { name: 'rdm__ping', arguments: '{"target":"a"}' } },
          ],
        }),
        openaiChunk({
          tool_calls: [{ index: 1, id: 'c1', type: 'function', function: { name: 'rdm__ping', arguments: '{"tar' } }],
        }),
      ],
      done: false,
    }
    const before = upstream.requests.length
    for (let attempt = 0; attempt < 4; attempt++) upstream.enqueue(cut)
    const calls = await run('gpt')
    expect(calls).toMatchObject({ status: 'failed', error: { code: 'upstream_error' } })
    expect(upstream.requests.length - before).toBe(4)
    expect(await eventsOf(calls.id as string, 'tool_call.created')).toEqual([])
  })

  it('an answer cut at the output-token limit says so on message.completed (finishReason: length)', async () => {
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: [openaiChunk({ role: 'assistant', content: 'The answer is cut he' }), openaiChunk({}, 'length')],
    })
    const cut = await run('gpt')
    expect(cut).toMatchObject({ status: 'completed' })
    expect((await eventsOf(cut.id as string, 'message.completed')).at(-1)).toMatchObject({
      content: 'The answer is cut he',
      status: 'completed',
      finishReason: 'length',
    })
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('whole', 2) })
    const whole = await run('gpt')
    expect((await eventsOf(whole.id as string, 'message.completed')).at(-1)).toMatchObject({ finishReason: 'stop' })
  })

  it('fails clearly when the upstream says tools are unsupported, or stalls, without leaking the key', async () => {
    upstream.enqueue({ kind: 'error', status: 400, body: { error: { message: 'This model does not support tools' } } })
    const unsupported = await run('gpt')
    expect(unsupported).toMatchObject({ status: 'failed', error: { code: 'tools_unsupported', upstreamStatus: 400 } })
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('never finishes', 5), stallAfter: 2 })
    const stalled = await run('gpt')
    expect(stalled).toMatchObject({ status: 'failed', error: { code: 'timeout' } })
    const everything = JSON.stringify(await testDb(store).selectFrom('events').select('data').execute())
    expect(everything).not.toContain('sk-test-secret')
  })
})
