import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import {
  openaiChunk,
  openaiTextChunks,
  openaiToolCallChunks,
  openaiUsageChunk,
  readChunksFixture,
  startFakeUpstream,
  type FakeUpstream,
} from '../../../test/helpers/fake-upstream.js'
import { ModelError, type ModelRequest, type StreamPart } from '../model.js'
import { waitFor } from '../../../test/helpers/waits.js'
import { streamWithRetries } from '../retry.js'
import { OpenAIChatModel, type OpenAIChatModelOptions } from './openai-chat-model.js'

const apiKey = 'sk-test-Zq8r2SECRETkey'
let upstream: FakeUpstream

beforeEach(async () => {
  upstream = await startFakeUpstream()
})
afterEach(async () => {
  await upstream.close()
})

function createModel(overrides: Partial<OpenAIChatModelOptions> = {}): OpenAIChatModel {
  return new OpenAIChatModel({
    id: 'test',
    model: 'fake-model',
    baseUrl: `${upstream.url}/v1`,
    apiKey,
    contextWindow: 32_000,
    supportsTools: true,
    ...overrides,
  })
}

const hello: ModelRequest = { messages: [{ role: 'user', content: 'Hello' }], tools: [] }

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

function fixture(name: string): object[] {
  return readChunksFixture(new URL(`./__fixtures__/${name}`, import.meta.url))
}

describe('OpenAIChatModel: the request', () => {
  it('POSTs a streaming chat completion with usage, the key as a bearer token, and no tools key when there are no tools', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Hi', 1) })
    await collect(createModel({ baseUrl: `${upstream.url}/v1/` }).stream(hello))
    const [request] = upstream.requests
    expect(request?.path).toBe('/v1/chat/completions')
    expect(request?.headers.authorization).toBe(`Bearer ${apiKey}`)
    expect(request?.headers['content-type']).toBe('application/json')
    expect(request?.body).toEqual({
      model: 'fake-model',
      messages: [{ role: 'user', content: 'Hello' }],
      stream: true,
      stream_options: { include_usage: true },
    })
    expect(request?.body).not.toHaveProperty('tools')
    expect(request?.body).not.toHaveProperty('tool_choice')
  })

  it('sends tools as functions, and a tool-only assistant turn with content null followed by tool results', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('It is sunny.', 2) })
    const parameters = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }
    await collect(
      createModel({ params: { maxTokens: 256, temperature: 0.7 }, headers: { 'x-gateway-tenant': 't1' } }).stream({
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Weather in Paris?' },
          {
            role: 'assistant',
            content: null,
            toolCalls: [{ id: 'call_1', name: 'weather__current', arguments: '{"city":"Paris"}' }],
          },
          { role: 'tool', toolCallId: 'call_1', content: '{"sky":"clear"}' },
        ],
        tools: [{ name: 'weather__current', description: 'Current weather', parameters }],
        // The request's own parameters win over the configured ones; the others stay.
        params: { temperature: 0.2, topP: 0.9, stop: ['END'] },
      }),
    )
    const [request] = upstream.requests
    expect(request?.headers['x-gateway-tenant']).toBe('t1')
    expect(request?.body.max_tokens).toBe(256)
    expect(request?.body).toMatchObject({ temperature: 0.2, top_p: 0.9, stop: ['END'] })
    expect(request?.body.tools).toEqual([
      { type: 'function', function: { name: 'weather__current', description: 'Current weather', parameters } },
    ])
    expect(request?.body).not.toHaveProperty('tool_choice')
    expect(request?.body.messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'weather__current', arguments: '{"city":"Paris"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '{"sky":"clear"}' },
    ])
  })

  it('gives a model without tool support no tools, whatever the request says', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('I cannot look that up.', 2) })
    await collect(
      createModel({ supportsTools: false }).stream({
        ...hello,
        tools: [{ name: 't', description: 'd', parameters: { type: 'object' } }],
      }),
    )
    expect(upstream.requests[0]?.body).not.toHaveProperty('tools')
  })
})

describe('OpenAIChatModel: streaming', () => {
  it('joins text whose bytes arrive split mid-token and mid-UTF-8 character', async () => {
    const pieces = ['日本語', ' and 👋', ' émoji', ' 🇫🇷!']
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: pieces.map((content) => ({ choices: [{ index: 0, delta: { content } }] })),
      splitEvery: 1,
    })
    const parts = await collect(createModel().stream(hello))
    expect(textOf(parts)).toBe(pieces.join(''))
    expect(parts.filter((part) => part.type === 'text-delta')).toHaveLength(4)
    expect(parts.at(-1)).toEqual({ type: 'finish', reason: null })
  })

  it('splits every frame in odd-sized pieces without losing a character', async () => {
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: openaiTextChunks('Grüße aus 東京 — ça va? 🙂', 5),
      splitEvery: 7,
    })
    const parts = await collect(createModel().stream(hello))
    expect(textOf(parts)).toBe('Grüße aus 東京 — ça va? 🙂')
    expect(parts.slice(-2)).toEqual([
      { type: 'usage', usage: { inputTokens: 10, outputTokens: 5 } },
      { type: 'finish', reason: 'stop' },
    ])
  })

  it('replays a recorded text stream: text deltas, then the usage-only chunk (empty choices), then finish', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: fixture('text-with-usage.chunks.txt') })
    expect(await collect(createModel().stream(hello))).toEqual([
      { type: 'text-delta', text: 'Bonjour' },
      { type: 'text-delta', text: ' — ' },
      { type: 'text-delta', text: '日本語 👋' },
      { type: 'usage', usage: { inputTokens: 21, outputTokens: 7, cachedInputTokens: 0, reasoningTokens: 0 } },
      { type: 'finish', reason: 'stop' },
    ])
  })

  it('joins two parallel tool calls whose fragments interleave by index, arguments passed through raw', async () => {
    const stringified = JSON.stringify(JSON.stringify({ city: 'Paris' }))
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: openaiToolCallChunks(
        [
          { id: 'call_a', name: 'weather__current', arguments: stringified },
          { id: 'call_b', name: 'notes__search', arguments: '{"query": "budget", ' },
        ],
        { interleave: true, argumentPieceSize: 3 },
      ),
    })
    expect(await collect(createModel().stream(hello))).toEqual([
      // A JSON string holding JSON, and invalid JSON: both reach the caller untouched (it decides).
      { type: 'tool-call', call: { id: 'call_a', name: 'weather__current', arguments: '"{\\"city\\":\\"Paris\\"}"' } },
      { type: 'tool-call', call: { id: 'call_b', name: 'notes__search', arguments: '{"query": "budget", ' } },
      { type: 'usage', usage: { inputTokens: 20, outputTokens: 12 } },
      { type: 'finish', reason: 'tool_calls' },
    ])
  })

  it('replays recorded parallel tool calls in index order', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: fixture('parallel-tool-calls.chunks.txt') })
    expect(await collect(createModel().stream(hello))).toEqual([
      {
        type: 'tool-call',
        call: { id: 'call_weather_paris', name: 'weather__current', arguments: '{"city": "Paris"}' },
      },
      {
        type: 'tool-call',
        call: { id: 'call_weather_tokyo', name: 'weather__current', arguments: '{"city": "東京"}' },
      },
      { type: 'usage', usage: { inputTokens: 80, outputTokens: 40 } },
      { type: 'finish', reason: 'tool_calls' },
    ])
  })

  it('keeps reading after finish_reason: argument fragments and usage sent later still count', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: fixture('finish-reason-before-trailing-frames.chunks.txt') })
    expect(await collect(createModel().stream(hello))).toEqual([
      { type: 'tool-call', call: { id: 'call-fx3', name: 'notes__search', arguments: '{"query": "budget"}' } },
      { type: 'usage', usage: { inputTokens: 33, outputTokens: 9 } },
      { type: 'finish', reason: 'tool_calls' },
    ])
  })

  it('accepts whole tool calls without an index (and arguments sent as an object)', async () => {
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: fixture('whole-tool-call-without-index.chunks.txt'),
      done: false,
    })
    expect(await collect(createModel().stream(hello))).toEqual([
      { type: 'tool-call', call: { id: 'call_a1', name: 'rdm__draft__compose', arguments: '{"title":"Q3"}' } },
      { type: 'tool-call', call: { id: 'call_b2', name: 'rdm__draft__list', arguments: '{"limit":5}' } },
      { type: 'usage', usage: { inputTokens: 50, outputTokens: 20 } },
      { type: 'finish', reason: 'tool_calls' },
    ])
  })

  it('ends at connection close when the server sends no [DONE]', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('No done marker', 3), done: false })
    const parts = await collect(createModel().stream(hello))
    expect(textOf(parts)).toBe('No done marker')
    expect(parts.at(-1)).toEqual({ type: 'finish', reason: 'stop' })
  })

  it('fails a stream that closes cleanly with neither a finish_reason nor [DONE]: the answer was cut', async () => {
    // Text so far, then the body ends: not a complete answer (retryable: nothing may have been shown yet).
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: [
        openaiChunk({ role: 'assistant', content: 'Partial answer then a clean ' }),
        openaiChunk({ content: 'close' }),
      ],
      done: false,
    })
    const text = await collectError(createModel().stream(hello))
    expect(text.error).toMatchObject({ code: 'upstream_error', isRetryable: true })
    expect(text.error.message).toContain('ended before the answer was complete')
    expect(textOf(text.parts)).toBe('Partial answer then a clean close')
    // A complete call, then one cut mid-arguments: no call is handed over (none may run).
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: [
        openaiChunk({
          tool_calls: [
            { index: 0, id: 'call_c0', type: 'function', function: { name: 'ping', arguments: '{"target":"one"}' } },
          ],
        }),
        openaiChunk({
          tool_calls: [{ index: 1, id: 'call_c1', type: 'function', function: { name: 'ping', arguments: '{"tar' } }],
        }),
      ],
      done: false,
    })
    const calls = await collectError(createModel().stream(hello))
    expect(calls.error).toMatchObject({ code: 'upstream_error', isRetryable: true })
    expect(calls.parts.filter((part) => part.type === 'tool-call')).toEqual([])
  })

  it('keeps as a new call a fragment that reuses an index with another id (Ollama sends parallel calls all at index 0)', async () => {
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: [
        openaiChunk({
          tool_calls: [
            { id: 'call_o1', index: 0, type: 'function', function: { name: 'ping', arguments: '{"target":"first"}' } },
          ],
        }),
        openaiChunk({
          tool_calls: [
            { id: 'call_o2', index: 0, type: 'function', function: { name: 'trace', arguments: '{"traceId":"abc' } },
          ],
        }),
        // A later fragment of the second call, by its index only.
        openaiChunk({ tool_calls: [{ index: 0, function: { arguments: '123"}' } }] }),
        openaiChunk({}, 'tool_calls'),
      ],
    })
    const parts = await collect(createModel().stream(hello))
    expect(parts.filter((part) => part.type === 'tool-call')).toEqual([
      { type: 'tool-call', call: { id: 'call_o1', name: 'ping', arguments: '{"target":"first"}' } },
      { type: 'tool-call', call: { id: 'call_o2', name: 'trace', arguments: '{"traceId":"abc123"}' } },
    ])
  })

  it('hands the usage a failed stream had already reported to the caller, on its error', async () => {
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: [openaiChunk({ content: 'Half an ans' }), openaiUsageChunk(900, 100)],
      cutAfter: 2,
    })
    const { error } = await collectError(createModel().stream(hello))
    expect(error.code).toBe('upstream_error')
    expect(error.usage).toEqual({ inputTokens: 900, outputTokens: 100 })
  })

  it('takes an answer as whole when the connection breaks after its finish reason', async () => {
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: [openaiChunk({ content: 'A complete answer.' }), openaiChunk({}, 'stop'), openaiUsageChunk(900, 100)],
      cutAfter: 3,
    })
    const parts = await collect(createModel().stream(hello))
    expect(textOf(parts)).toBe('A complete answer.')
    expect(parts.slice(-2)).toEqual([
      { type: 'usage', usage: { inputTokens: 900, outputTokens: 100 } },
      { type: 'finish', reason: 'stop' },
    ])
  })

  it('stops at [DONE] even if the connection stays open', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Done here', 2), stallAfter: 99 })
    const parts = await collect(createModel({ idleTimeoutMs: 5_000 }).stream(hello))
    expect(textOf(parts)).toBe('Done here')
  })

  it('skips malformed chunks and ignores unknown fields', async () => {
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: [
        openaiChunk({ content: 'a' }),
        '{"choices": [{"delta": {"content": "broken',
        { surprise: true, choices: 'not-an-array' },
        { choices: [null, 5] },
        openaiChunk({ content: 'b', reasoning_content: 'hmm' }),
        openaiUsageChunk(3, 2),
      ],
    })
    expect(await collect(createModel().stream(hello))).toEqual([
      { type: 'text-delta', text: 'a' },
      { type: 'text-delta', text: 'b' },
      { type: 'usage', usage: { inputTokens: 3, outputTokens: 2 } },
      { type: 'finish', reason: null },
    ])
  })

  it('throws a retryable upstream_error for an error chunk mid-stream, after what was yielded', async () => {
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: [
        openaiChunk({ content: 'partial' }),
        { error: { message: 'The server had an error while processing your request.', type: 'server_error' } },
      ],
    })
    const { error, parts } = await collectError(createModel().stream(hello))
    expect(textOf(parts)).toBe('partial')
    expect(error.code).toBe('upstream_error')
    expect(error.isRetryable).toBe(true)
    expect(error.message).toContain('The server had an error')
  })
})

describe('OpenAIChatModel: upstream faults', () => {
  it('maps a 429 with Retry-After seconds to a retryable upstream_error carrying the delay', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 429,
      body: { error: { message: 'Rate limit reached', type: 'requests', code: 'rate_limit_exceeded' } },
      headers: { 'retry-after': '2' },
    })
    const { error } = await collectError(createModel().stream(hello))
    expect(error).toMatchObject({ code: 'upstream_error', upstreamStatus: 429, isRetryable: true, retryAfterMs: 2000 })
    expect(error.message).toBe('Upstream answered HTTP 429: Rate limit reached')
  })

  it('reads Retry-After as an HTTP-date', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 503,
      body: 'overloaded',
      headers: { 'retry-after': new Date(Date.now() + 30_000).toUTCString() },
    })
    const { error } = await collectError(createModel().stream(hello))
    expect(error).toMatchObject({ code: 'upstream_error', upstreamStatus: 503, isRetryable: true })
    expect(error.retryAfterMs).toBeGreaterThan(25_000)
    expect(error.retryAfterMs).toBeLessThanOrEqual(30_000)
  })

  it('maps other 4xx to a non-retryable upstream_error', async () => {
    upstream.enqueue({ kind: 'error', status: 400, body: { error: { message: "Invalid value for 'messages'" } } })
    const { error } = await collectError(createModel().stream(hello))
    expect(error).toMatchObject({
      code: 'upstream_error',
      upstreamStatus: 400,
      isRetryable: false,
      retryAfterMs: undefined,
    })
  })

  it('maps a 400 saying tools are unsupported to tools_unsupported (keywords case-insensitive, configurable)', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 400,
      body: { error: { message: 'registry/library/tiny-model does NOT support tools' } },
    })
    const { error } = await collectError(
      createModel().stream({ ...hello, tools: [{ name: 't', description: 'd', parameters: { type: 'object' } }] }),
    )
    expect(error).toMatchObject({ code: 'tools_unsupported', upstreamStatus: 400, isRetryable: false })
    expect(error.message).toContain('does NOT support tools')

    upstream.enqueue({ kind: 'error', status: 422, body: 'This deployment cannot call functions' })
    const custom = await collectError(
      createModel({ toolsUnsupportedKeywords: ['cannot call functions'] }).stream(hello),
    )
    expect(custom.error.code).toBe('tools_unsupported')
  })

  it('aborts a stream that stalls for idleTimeoutMs and throws timeout', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('one two three', 3), stallAfter: 2 })
    const started = Date.now()
    const { error, parts } = await collectError(createModel({ idleTimeoutMs: 200 }).stream(hello))
    expect(error.code).toBe('timeout')
    expect(error.message).toContain('200 ms')
    expect(textOf(parts)).not.toBe('')
    expect(Date.now() - started).toBeLessThan(2_000)
  })

  it('times out while waiting for response headers too', async () => {
    upstream.enqueue({ kind: 'hang' })
    const { error } = await collectError(createModel({ idleTimeoutMs: 200 }).stream(hello))
    expect(error.code).toBe('timeout')
  })

  it('throws a retryable upstream_error when the connection is cut mid-stream', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('cut here please', 4), cutAfter: 3 })
    const { error, parts } = await collectError(createModel().stream(hello))
    expect(error).toMatchObject({ code: 'upstream_error', isRetryable: true })
    expect(error.message).toContain('mid-stream')
    expect(parts.length).toBeGreaterThan(0)
  })

  it('throws a retryable upstream_error when the upstream cannot be reached', async () => {
    const closed = await startFakeUpstream()
    const baseUrl = `${closed.url}/v1`
    await closed.close()
    const { error } = await collectError(createModel({ baseUrl }).stream(hello))
    expect(error).toMatchObject({ code: 'upstream_error', isRetryable: true, upstreamStatus: undefined })
    expect(error.message).toContain('Could not reach the upstream')
  })

  it('does not follow redirects (they would carry the key elsewhere)', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 307,
      body: '',
      headers: { location: 'http://127.0.0.1:9/v1/chat/completions' },
    })
    const { error } = await collectError(createModel().stream(hello))
    expect(error).toMatchObject({ code: 'upstream_error', upstreamStatus: 307, isRetryable: false })
    expect(error.message).toContain('check the base URL')
    expect(upstream.requests).toHaveLength(1)
  })

  it('rejects a 200 answer that is JSON instead of an event stream', async () => {
    upstream.enqueue({ kind: 'error', status: 200, body: { error: { message: 'model is loading' } } })
    const { error } = await collectError(createModel().stream(hello))
    expect(error).toMatchObject({ code: 'upstream_error', isRetryable: false })
    expect(error.message).toContain('model is loading')
  })

  it('never puts the API key in an error message, even when the upstream echoes it', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 401,
      body: { error: { message: `Incorrect API key provided: ${apiKey}.` } },
    })
    upstream.enqueue({ kind: 'error', status: 400, body: `tools are not supported for key ${apiKey}` })
    upstream.enqueue({ kind: 'openai-stream', chunks: [{ error: { message: `quota exceeded for ${apiKey}` } }] })
    const errors = [
      await collectError(createModel().stream(hello)),
      await collectError(createModel().stream(hello)),
      await collectError(createModel().stream(hello)),
    ]
    expect(errors.map(({ error }) => error.code)).toEqual(['upstream_error', 'tools_unsupported', 'upstream_error'])
    for (const { error } of errors) {
      expect(error.message).not.toContain(apiKey)
      expect(error.message).toContain('[redacted]')
      expect(JSON.stringify(error)).not.toContain(apiKey)
    }
  })

  it('never puts a short header value, or a masked echo of the key, in an error message', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 401,
      body: { error: { message: `Incorrect API key provided: ${apiKey.slice(0, 13)}***. Tenant t-98765, org acme` } },
    })
    const { error } = await collectError(
      createModel({ headers: { 'x-gateway-tenant': 't-98765', 'x-org': 'acme' } }).stream(hello),
    )
    expect(error.message).not.toContain('t-98765')
    expect(error.message).not.toContain('acme')
    expect(error.message).not.toContain(apiKey.slice(0, 13))
    expect(error.message).toContain('Incorrect API key provided: [redacted]. Tenant [redacted], org [redacted]')
  })

  it('retries a 200 whose JSON body reports a server error, but not one reporting a client error', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 200,
      body: { error: { type: 'server_error', code: 500, message: 'boom' } },
    })
    const { error } = await collectError(createModel().stream(hello))
    expect(error).toMatchObject({ code: 'upstream_error', isRetryable: true })
    upstream.enqueue({ kind: 'error', status: 200, body: { error: { type: 'invalid_request_error', message: 'bad' } } })
    expect((await collectError(createModel().stream(hello))).error.isRetryable).toBe(false)
  })

  it('never puts a configured header value, or the key without its prefix, in an error message', async () => {
    const gateway = 'HDRSECRETvalue98765'
    const bare = apiKey.replace(/^sk-test-/, '')
    upstream.enqueue({ kind: 'error', status: 400, body: { error: { message: `gw ${gateway}; key ${bare}` } } })
    const { error } = await collectError(createModel({ headers: { 'x-gw-secret': gateway } }).stream(hello))
    expect(error.message).not.toContain(gateway)
    expect(error.message).not.toContain(bare)
    expect(error.message).toContain('gw [redacted]; key [redacted]')
  })
})

describe('OpenAIChatModel: cancellation', () => {
  it('aborting the signal mid-stream throws cancelled', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('one two three', 3), stallAfter: 2 })
    const controller = new AbortController()
    const parts: StreamPart[] = []
    const started = Date.now()
    let caught: unknown
    try {
      for await (const part of createModel({ idleTimeoutMs: 10_000 }).stream({ ...hello, signal: controller.signal })) {
        parts.push(part)
        setTimeout(() => controller.abort(), 20)
      }
    } catch (error) {
      caught = error
    }
    expect(caught).toBeInstanceOf(ModelError)
    expect((caught as ModelError).code).toBe('cancelled')
    expect(parts.length).toBeGreaterThan(0)
    expect(Date.now() - started).toBeLessThan(2_000)
  })

  it('an already aborted signal throws cancelled without calling the upstream', async () => {
    const { error } = await collectError(createModel().stream({ ...hello, signal: AbortSignal.abort() }))
    expect(error.code).toBe('cancelled')
    expect(upstream.requests).toHaveLength(0)
  })

  it('an answer whose body ends after [DONE] is read to its end: the connection is kept, not cut', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('one', 1), endDelayMs: 50 })
    expect(textOf(await collect(createModel().stream(hello)))).toBe('one')
    await waitFor(() => upstream.outcomes.length === 1 || undefined, { what: 'the response to close' })
    expect(upstream.outcomes).toEqual(['finished'])
    expect(upstream.connections).toBe(1)
  })

  it('stopping before the answer ends closes the connection at once: the upstream stops generating', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('one two three four', 4), delayMs: 30 })
    for await (const part of createModel().stream(hello)) {
      if (part.type === 'text-delta') break
    }
    await waitFor(() => upstream.outcomes.length === 1 || undefined, { what: 'the response to close' })
    expect(upstream.outcomes).toEqual(['cut'])
  })

  it('stopping the iteration early releases the connection', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('one two three', 3), stallAfter: 2 })
    for await (const part of createModel({ idleTimeoutMs: 10_000 }).stream(hello)) {
      if (part.type === 'text-delta') break
    }
    // The next request still gets through (nothing left hanging on our side).
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('again', 1) })
    expect(textOf(await collect(createModel().stream(hello)))).toBe('again')
  })
})

describe('OpenAIChatModel with streamWithRetries over the wire', () => {
  it('retries a 429 (honouring Retry-After) and a 503, then streams the answer', async () => {
    upstream.enqueue({
      kind: 'error',
      status: 429,
      body: { error: { message: 'slow down' } },
      headers: { 'retry-after': '0.05' },
    })
    upstream.enqueue({ kind: 'error', status: 503, body: 'unavailable' })
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('third time lucky', 3) })
    const waits: number[] = []
    const parts = await collect(
      streamWithRetries(createModel(), hello, { baseDelayMs: 10, onRetry: ({ delayMs }) => waits.push(delayMs) }),
    )
    expect(textOf(parts)).toBe('third time lucky')
    expect(upstream.requests).toHaveLength(3)
    expect(waits[0]).toBe(50)
    expect(waits[1]).toBeLessThan(20)
  })

  it('retries a connection cut before any part, but not one after text was streamed', async () => {
    // Cut after the role chunk only: nothing reached the caller, so the call is repeated.
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('whole', 1), cutAfter: 1 })
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('whole', 1) })
    expect(textOf(await collect(streamWithRetries(createModel(), hello, { baseDelayMs: 1 })))).toBe('whole')
    expect(upstream.requests).toHaveLength(2)

    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('half and half', 3), cutAfter: 2 })
    const { error, parts } = await collectError(streamWithRetries(createModel(), hello, { baseDelayMs: 1 }))
    expect(error.code).toBe('upstream_error')
    expect(textOf(parts)).not.toBe('')
    expect(upstream.requests).toHaveLength(3)
  })

  it('does not retry tools_unsupported', async () => {
    upstream.enqueue({ kind: 'error', status: 400, body: 'tools are not supported' })
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('unused', 1) })
    const { error } = await collectError(streamWithRetries(createModel(), hello, { baseDelayMs: 1 }))
    expect(error.code).toBe('tools_unsupported')
    expect(upstream.requests).toHaveLength(1)
  })
})
