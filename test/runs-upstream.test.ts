import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AnthropicMessagesModel, OpenAIChatModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import {
  anthropicMessageEnd,
  anthropicMessageStart,
  anthropicTextEvents,
  anthropicToolUseEvents,
  openaiTextChunks,
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
