import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import {
  anthropicMessageEnd,
  anthropicMessageStart,
  anthropicTextEvents,
  anthropicToolUseEvents,
  readChunksFixture,
  startFakeUpstream,
  type FakeUpstream,
} from '../../../test/helpers/fake-upstream.js'
import { ModelError, type ModelRequest, type StreamPart } from '../model.js'
import { AnthropicMessagesModel, type AnthropicMessagesModelOptions } from './anthropic-messages-model.js'

const apiKey = 'sk-ant-test-4xSECRETkey'
let upstream: FakeUpstream

beforeEach(async () => {
  upstream = await startFakeUpstream()
})
afterEach(async () => {
  await upstream.close()
})

function createModel(overrides: Partial<AnthropicMessagesModelOptions> = {}): AnthropicMessagesModel {
  return new AnthropicMessagesModel({
    id: 'test',
    model: 'fake-model',
    baseUrl: upstream.url,
    apiKey,
    contextWindow: 200_000,
    supportsTools: true,
    ...overrides,
  })
}

const hello: ModelRequest = {
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hello' },
  ],
  tools: [],
}

async function collect(stream: AsyncIterable<StreamPart>): Promise<StreamPart[]> {
  const parts: StreamPart[] = []
  for await (const part of stream) parts.push(part)
  return parts
}

async function collectError(stream: AsyncIterable<StreamPart>): Promise<{ error: ModelError; parts: StreamPart[] }> {
  const parts: StreamPart[] = []
  try {
    for await (const part of stream) parts.push(part)
  } catch (error) {
    expect(error).toBeInstanceOf(ModelError)
    return { error: error as ModelError, parts }
  }
  throw new Error(`expected a ModelError, got parts ${JSON.stringify(parts)}`)
}

function textOf(parts: StreamPart[]): string {
  return parts.map((part) => (part.type === 'text-delta' ? part.text : '')).join('')
}

/** A recorded fixture: one event `data` per line; the SSE event name is its `type`. */
function fixture(name: string): Array<{ event: string; data: object }> {
  return readChunksFixture(new URL(`./__fixtures__/${name}`, import.meta.url)).map((data) => ({
    event: String((data as { type?: unknown }).type),
    data,
  }))
}

describe('AnthropicMessagesModel: the request', () => {
  it('POSTs /v1/messages with x-api-key, the API version, max_tokens, system apart, and no tools key without tools', async () => {
    upstream.enqueue({ kind: 'anthropic-stream', events: anthropicTextEvents('Hi', 1) })
    await collect(createModel().stream(hello))
    const [request] = upstream.requests
    expect(request?.path).toBe('/v1/messages')
    expect(request?.headers['x-api-key']).toBe(apiKey)
    expect(request?.headers['anthropic-version']).toBe('2023-06-01')
    expect(request?.headers.authorization).toBeUndefined()
    expect(request?.body).toEqual({
      model: 'fake-model',
      max_tokens: 4096,
      system: 'Be brief.',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }],
      stream: true,
    })
  })

  it('sends tools with input_schema, tool_use blocks with parsed input, and consecutive tool results in one user message', async () => {
    upstream.enqueue({ kind: 'anthropic-stream', events: anthropicTextEvents('Sunny in both.', 2) })
    const parameters = { type: 'object', properties: { city: { type: 'string' } } }
    await collect(
      createModel({ baseUrl: `${upstream.url}/v1/`, params: { maxTokens: 1000, topP: 0.5 } }).stream({
        messages: [
          { role: 'user', content: 'Weather in Paris and Tokyo?' },
          {
            role: 'assistant',
            content: null,
            toolCalls: [
              { id: 'toolu_1', name: 'weather__current', arguments: '{"city":"Paris"}' },
              { id: 'toolu_2', name: 'weather__current', arguments: '{"city": "Tok' },
            ],
          },
          { role: 'tool', toolCallId: 'toolu_1', content: 'clear' },
          { role: 'tool', toolCallId: 'toolu_2', content: 'error: invalid arguments' },
        ],
        tools: [{ name: 'weather__current', description: 'Current weather', parameters }],
        params: { temperature: 0, stop: ['\n\nHuman:'] },
      }),
    )
    const [request] = upstream.requests
    expect(request?.path).toBe('/v1/messages')
    expect(request?.body.max_tokens).toBe(1000)
    expect(request?.body).toMatchObject({ temperature: 0, top_p: 0.5, stop_sequences: ['\n\nHuman:'] })
    expect(request?.body).not.toHaveProperty('system')
    expect(request?.body.tools).toEqual([
      { name: 'weather__current', description: 'Current weather', input_schema: parameters },
    ])
    expect(request?.body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather in Paris and Tokyo?' }] },
      {
        role: 'assistant',
        content: [
          { type: 'tool_use', id: 'toolu_1', name: 'weather__current', input: { city: 'Paris' } },
          { type: 'tool_use', id: 'toolu_2', name: 'weather__current', input: {} },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_1', content: 'clear' },
          { type: 'tool_result', tool_use_id: 'toolu_2', content: 'error: invalid arguments' },
        ],
      },
    ])
  })
})

describe('AnthropicMessagesModel: a call that offers no tools', () => {
  it('sends earlier calls and results as text (the API refuses tool_use and tool_result blocks without tools)', async () => {
    upstream.enqueue({ kind: 'anthropic-stream', events: anthropicTextEvents('Paris is clear.', 1) })
    await collect(
      createModel().stream({
        messages: [
          { role: 'user', content: 'Weather in Paris?' },
          {
            role: 'assistant',
            content: null,
            toolCalls: [{ id: 'toolu_1', name: 'weather', arguments: '{"city":"Paris"}' }],
          },
          { role: 'tool', toolCallId: 'toolu_1', content: 'clear' },
        ],
        tools: [],
      }),
    )
    const [request] = upstream.requests
    expect(request?.body).not.toHaveProperty('tools')
    expect(request?.body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] },
      { role: 'assistant', content: [{ type: 'text', text: '[called weather (call toolu_1) with {"city":"Paris"}]' }] },
      { role: 'user', content: [{ type: 'text', text: '[result of call toolu_1]\nclear' }] },
    ])
  })
})

describe('AnthropicMessagesModel: streaming', () => {
  it('joins text whose bytes arrive split mid-token and mid-UTF-8 character', async () => {
    const pieces = ['日本語', ' and 👋', ' émoji']
    upstream.enqueue({
      kind: 'anthropic-stream',
      // Compact events: every byte is its own write.
      events: [
        ...pieces.map((text) => ({
          event: 'content_block_delta',
          data: { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text } },
        })),
        { event: 'message_delta', data: { type: 'message_delta', delta: { stop_reason: 'end_turn' } } },
      ],
      splitEvery: 1,
    })
    const parts = await collect(createModel().stream(hello))
    expect(parts).toEqual([...pieces.map((text) => ({ type: 'text-delta', text })), { type: 'finish', reason: 'stop' }])
  })

  it('replays a recorded text + tool_use stream: input_json_delta joined per block, usage with cached input', async () => {
    upstream.enqueue({ kind: 'anthropic-stream', events: fixture('text-and-tool-use.chunks.txt'), splitEvery: 11 })
    expect(await collect(createModel().stream(hello))).toEqual([
      { type: 'text-delta', text: 'Let me check ' },
      { type: 'text-delta', text: 'the weather in 東京.' },
      {
        type: 'tool-call',
        call: { id: 'toolu_fx1', name: 'weather__current', arguments: '{"city": "Tokyo", "unit": "c"}' },
      },
      // No input_json_delta at all: a tool without parameters.
      { type: 'tool-call', call: { id: 'toolu_fx2', name: 'clock__now', arguments: '{}' } },
      { type: 'usage', usage: { inputTokens: 572, outputTokens: 89, cachedInputTokens: 100 } },
      { type: 'finish', reason: 'tool_calls' },
    ])
  })

  it('ignores thinking blocks', async () => {
    upstream.enqueue({ kind: 'anthropic-stream', events: fixture('thinking-then-text.chunks.txt') })
    expect(await collect(createModel().stream(hello))).toEqual([
      { type: 'text-delta', text: 'Hello!' },
      { type: 'usage', usage: { inputTokens: 12, outputTokens: 15 } },
      { type: 'finish', reason: 'stop' },
    ])
  })

  it('passes interleaved tool_use blocks, stringified and invalid JSON arguments through raw', async () => {
    const first = anthropicToolUseEvents(
      0,
      { id: 'toolu_a', name: 'weather__current', arguments: JSON.stringify(JSON.stringify({ city: 'Paris' })) },
      4,
    )
    const second = anthropicToolUseEvents(1, { id: 'toolu_b', name: 'notes__search', arguments: '{"query": ' }, 3)
    const interleaved: Array<{ event: string; data: object }> = []
    for (let step = 0; step < Math.max(first.length, second.length); step++) {
      if (first[step]) interleaved.push(first[step] as { event: string; data: object })
      if (second[step]) interleaved.push(second[step] as { event: string; data: object })
    }
    upstream.enqueue({
      kind: 'anthropic-stream',
      events: [anthropicMessageStart(7), ...interleaved, ...anthropicMessageEnd('tool_use', 30)],
    })
    expect(await collect(createModel().stream(hello))).toEqual([
      { type: 'tool-call', call: { id: 'toolu_a', name: 'weather__current', arguments: '"{\\"city\\":\\"Paris\\"}"' } },
      { type: 'tool-call', call: { id: 'toolu_b', name: 'notes__search', arguments: '{"query": ' } },
      { type: 'usage', usage: { inputTokens: 7, outputTokens: 30 } },
      { type: 'finish', reason: 'tool_calls' },
    ])
  })

  it('maps max_tokens to length and skips malformed events', async () => {
    upstream.enqueue({
      kind: 'anthropic-stream',
      events: [
        anthropicMessageStart(),
        {
          event: 'content_block_delta',
          data: '{"type": "content_block_delta", "index": 0, "delta": {"type": "text_de',
        },
        ...anthropicTextEvents('cut short', 1).slice(1, -2),
        ...anthropicMessageEnd('max_tokens', 4096),
      ],
    })
    const parts = await collect(createModel().stream(hello))
    expect(textOf(parts)).toBe('cut short')
    expect(parts.at(-1)).toEqual({ type: 'finish', reason: 'length' })
  })

  it('throws an error event as upstream_error (retryable when overloaded), after what was yielded', async () => {
    upstream.enqueue({
      kind: 'anthropic-stream',
      events: [
        ...anthropicTextEvents('partial', 1).slice(0, 4),
        { event: 'error', data: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } } },
      ],
    })
    const { error, parts } = await collectError(createModel().stream(hello))
    expect(textOf(parts)).toBe('partial')
    expect(error).toMatchObject({ code: 'upstream_error', isRetryable: true })
    expect(error.message).toContain('overloaded_error')

    upstream.enqueue({
      kind: 'anthropic-stream',
      events: [
        anthropicMessageStart(),
        { event: 'error', data: { type: 'error', error: { type: 'invalid_request_error', message: 'bad' } } },
      ],
    })
    expect((await collectError(createModel().stream(hello))).error.isRetryable).toBe(false)
  })

  it('hands the usage reported before an error event to the caller, on its error', async () => {
    upstream.enqueue({
      kind: 'anthropic-stream',
      events: [
        anthropicMessageStart(5000),
        { event: 'error', data: { type: 'error', error: { type: 'api_error', message: 'Internal' } } },
      ],
    })
    const { error } = await collectError(createModel().stream(hello))
    expect(error.usage).toMatchObject({ inputTokens: 5000 })
  })

  it('a stream that ends cleanly before the message is complete is a retryable upstream_error', async () => {
    upstream.enqueue({ kind: 'anthropic-stream', events: anthropicTextEvents('half', 1).slice(0, 4) })
    const { error } = await collectError(createModel().stream(hello))
    expect(error).toMatchObject({ code: 'upstream_error', isRetryable: true })
  })
})

describe('AnthropicMessagesModel: upstream faults', () => {
  it('maps a 429 with Retry-After to a retryable upstream_error carrying the delay', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 429,
      body: {
        type: 'error',
        error: {
          type: 'rate_limit_error',
          message: 'Number of request tokens has exceeded your per-minute rate limit',
        },
      },
      headers: { 'retry-after': '7' },
    })
    const { error } = await collectError(createModel().stream(hello))
    expect(error).toMatchObject({ code: 'upstream_error', upstreamStatus: 429, isRetryable: true, retryAfterMs: 7000 })
    expect(error.message).toContain('per-minute rate limit')
  })

  it('maps 529 (overloaded) to a retryable upstream_error', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 529,
      body: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } },
    })
    expect((await collectError(createModel().stream(hello))).error).toMatchObject({
      code: 'upstream_error',
      upstreamStatus: 529,
      isRetryable: true,
    })
  })

  it('maps a 400 saying tools are not supported to tools_unsupported', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 400,
      body: {
        type: 'error',
        error: { type: 'invalid_request_error', message: 'Tool use is not supported by this model' },
      },
    })
    expect((await collectError(createModel().stream(hello))).error).toMatchObject({
      code: 'tools_unsupported',
      upstreamStatus: 400,
      isRetryable: false,
    })
  })

  it('aborts a stream that stalls for idleTimeoutMs and throws timeout', async () => {
    upstream.enqueue({ kind: 'anthropic-stream', events: anthropicTextEvents('one two three', 3), stallAfter: 4 })
    const started = Date.now()
    const { error, parts } = await collectError(createModel({ idleTimeoutMs: 200 }).stream(hello))
    expect(error.code).toBe('timeout')
    expect(textOf(parts)).not.toBe('')
    expect(Date.now() - started).toBeLessThan(2_000)
  })

  it('throws a retryable upstream_error when the connection is cut mid-stream', async () => {
    upstream.enqueue({ kind: 'anthropic-stream', events: anthropicTextEvents('one two three', 3), cutAfter: 4 })
    const { error, parts } = await collectError(createModel().stream(hello))
    expect(error).toMatchObject({ code: 'upstream_error', isRetryable: true })
    expect(parts.length).toBeGreaterThan(0)
  })

  it('never puts the API key in an error message', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 401,
      body: { type: 'error', error: { type: 'authentication_error', message: `invalid x-api-key ${apiKey}` } },
    })
    const { error } = await collectError(createModel().stream(hello))
    expect(error.message).not.toContain(apiKey)
    expect(JSON.stringify(error)).not.toContain(apiKey)
    expect(error).toMatchObject({ code: 'upstream_error', upstreamStatus: 401, isRetryable: false })
  })

  it('aborting the signal mid-stream throws cancelled', async () => {
    upstream.enqueue({ kind: 'anthropic-stream', events: anthropicTextEvents('one two three', 3), stallAfter: 4 })
    const controller = new AbortController()
    const parts: StreamPart[] = []
    let caught: unknown
    try {
      for await (const part of createModel({ idleTimeoutMs: 10_000 }).stream({ ...hello, signal: controller.signal })) {
        parts.push(part)
        controller.abort()
      }
    } catch (error) {
      caught = error
    }
    expect((caught as ModelError).code).toBe('cancelled')
    expect(parts).toHaveLength(1)
  })
})
