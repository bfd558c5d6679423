import { readFileSync } from 'node:fs'
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { OpenAIChatModel } from '../../src/llm/index.js'

/** How a streamed reply is written. */
export interface StreamReplyOptions {
  /** Write the raw bytes in pieces of this many bytes (splits tokens, frames and UTF-8 characters). */
  splitEvery?: number
  /** Milliseconds before each frame (and, with `splitEvery`, between pieces; default 1 there). */
  delayMs?: number
  /** Send this many frames, then nothing more while keeping the connection open. */
  stallAfter?: number
  /** Send this many frames, then destroy the socket. */
  cutAfter?: number
  /** Extra response headers. */
  headers?: Record<string, string>
  /** Write every frame and the end at once, in one write (an answer that arrives whole). */
  whole?: boolean
  /** Milliseconds between the last frame (`[DONE]`) and the body's end. */
  endDelayMs?: number
}

/** A chat-completions stream: each chunk is sent as `data: <json>`, then `data: [DONE]` unless `done: false`. */
export interface OpenAIStreamReply extends StreamReplyOptions {
  kind: 'openai-stream'
  /** Objects are JSON-encoded; strings are sent verbatim as the data line (for malformed frames). */
  chunks: Array<object | string>
  done?: boolean
}

/** A Messages API stream: each event is sent as `event: <event>` + `data: <json>`. */
export interface AnthropicStreamReply extends StreamReplyOptions {
  kind: 'anthropic-stream'
  events: Array<{ event: string; data: object | string }>
}

/** A plain answer: any status, a JSON (object) or text (string) body. */
export interface ErrorReply {
  kind: 'error'
  status: number
  body: object | string
  headers?: Record<string, string>
}

/** Never answers, not even with headers, until the server closes. */
export interface HangReply {
  kind: 'hang'
}

export type FakeReply = OpenAIStreamReply | AnthropicStreamReply | ErrorReply | HangReply

export interface RecordedRequest {
  method: string
  path: string
  headers: IncomingHttpHeaders
  /** The JSON body, or the raw text when it is not JSON. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary JSON
  body: any
}

export interface FakeUpstream {
  /** `http://127.0.0.1:<port>`: use as a model's base URL. */
  url: string
  /** Every request received, in order. */
  requests: RecordedRequest[]
  /** How many TCP connections clients have opened so far. */
  readonly connections: number
  /** How each response closed, in order: written to its end, or cut (the client closed the connection first). */
  outcomes: Array<'finished' | 'cut'>
  /** Scripts the reply to the next unanswered request (replies are used first in, first out). */
  enqueue(reply: FakeReply): void
  /** Drops the replies not used yet; returns how many there were. */
  clear(): number
  /** Destroys open connections (stalled streams included) and stops listening. */
  close(): Promise<void>
}

/**
 * A local HTTP server speaking the chat-completions and Messages SSE wire formats, driven by a script of
 * replies, for adapter tests over real loopback sockets with real `fetch`. A request with no reply
 * scripted gets a 500.
 */
export async function startFakeUpstream(): Promise<FakeUpstream> {
  const replies: FakeReply[] = []
  const requests: RecordedRequest[] = []
  const outcomes: Array<'finished' | 'cut'> = []
  const server = createServer((request, response) => {
    response.on('close', () => outcomes.push(response.writableFinished ? 'finished' : 'cut'))
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8')
      let body: unknown = text
      try {
        body = JSON.parse(text)
      } catch {
        // Kept as text.
      }
      requests.push({ method: request.method ?? 'GET', path: request.url ?? '/', headers: request.headers, body })
      const reply = replies.shift()
      void answer(response, reply).catch(() => response.destroy())
    })
  })
  let connections = 0
  server.on('connection', () => connections++)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    outcomes,
    get connections() {
      return connections
    },
    enqueue(reply) {
      replies.push(reply)
    },
    clear() {
      return replies.splice(0).length
    },
    async close() {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

async function answer(response: ServerResponse, reply: FakeReply | undefined): Promise<void> {
  if (!reply) {
    response.writeHead(500, { 'content-type': 'application/json' })
    response.end(JSON.stringify({ error: { message: 'fake upstream: no reply scripted for this request' } }))
    return
  }
  if (reply.kind === 'hang') return
  if (reply.kind === 'error') {
    const isText = typeof reply.body === 'string'
    response.writeHead(reply.status, { 'content-type': isText ? 'text/plain' : 'application/json', ...reply.headers })
    response.end(isText ? reply.body : JSON.stringify(reply.body))
    return
  }
  const frames =
    reply.kind === 'openai-stream'
      ? [
          ...reply.chunks.map((chunk) => `data: ${encode(chunk)}\n\n`),
          ...(reply.done === false ? [] : ['data: [DONE]\n\n']),
        ]
      : reply.events.map(({ event, data }) => `event: ${event}\ndata: ${encode(data)}\n\n`)
  response.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    ...reply.headers,
  })
  response.flushHeaders()
  if (reply.whole) {
    response.end(frames.join(''))
    return
  }
  for (const [index, frame] of frames.entries()) {
    if (reply.stallAfter === index) return
    if (reply.cutAfter === index) {
      response.socket?.destroy()
      return
    }
    if (reply.delayMs) await sleep(reply.delayMs)
    const bytes = Buffer.from(frame, 'utf8')
    const size = reply.splitEvery ?? bytes.length
    for (let start = 0; start < bytes.length; start += size) {
      if (response.destroyed) return
      // Waiting for the flush keeps a later `cutAfter` from discarding frames already "sent".
      await new Promise<void>((resolve) => response.write(bytes.subarray(start, start + size), () => resolve()))
      // A pause lets each piece reach the client as its own read.
      if (reply.splitEvery) await sleep(reply.delayMs ?? 1)
    }
  }
  if (reply.stallAfter !== undefined && reply.stallAfter >= frames.length) return
  if (reply.cutAfter !== undefined && reply.cutAfter >= frames.length) {
    response.socket?.destroy()
    return
  }
  if (reply.endDelayMs) await sleep(reply.endDelayMs)
  response.end()
}

function encode(data: object | string): string {
  return typeof data === 'string' ? data : JSON.stringify(data)
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** Reads a recorded `*.chunks.txt` fixture: one JSON value per non-empty line. */
export function readChunksFixture(path: string | URL): object[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as object)
}

// ---- chat-completions chunk builders ----------------------------------------------------------------

const chunkBase = { id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 1_700_000_000, model: 'fake-model' }

/** One chunk whose only choice carries `delta` (and optionally a finish reason). */
export function openaiChunk(delta: object, finishReason: string | null = null): object {
  return { ...chunkBase, choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }] }
}

/** The usage-only chunk `stream_options.include_usage` adds at the end: empty `choices`. */
export function openaiUsageChunk(promptTokens: number, completionTokens: number): object {
  return {
    ...chunkBase,
    choices: [],
    usage: {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
    },
  }
}

/**
 * A whole text answer: a role chunk, `text` in `pieces` content chunks (split by characters), a finish
 * chunk, then a usage-only chunk.
 */
export function openaiTextChunks(
  text: string,
  pieces: number,
  usage: { prompt: number; completion: number } = { prompt: 10, completion: 5 },
): object[] {
  const characters = [...text]
  const size = Math.max(1, Math.ceil(characters.length / pieces))
  const chunks: object[] = [openaiChunk({ role: 'assistant', content: '' })]
  for (let start = 0; start < characters.length; start += size)
    chunks.push(openaiChunk({ content: characters.slice(start, start + size).join('') }))
  chunks.push(openaiChunk({}, 'stop'), openaiUsageChunk(usage.prompt, usage.completion))
  return chunks
}

export interface FakeToolCall {
  id: string
  name: string
  /** Raw argument text, sent as is. */
  arguments: string
}

/**
 * Tool calls streamed the way chat-completions does: per call a first fragment with `index`, `id`, `type`
 * and `function.name` (empty arguments), then the arguments in pieces of `argumentPieceSize` characters
 * carrying only `index`. `interleave: true` alternates the calls' fragments; then a `tool_calls` finish
 * chunk and a usage-only chunk.
 */
export function openaiToolCallChunks(
  calls: FakeToolCall[],
  options: { argumentPieceSize?: number; interleave?: boolean } = {},
): object[] {
  const pieceSize = options.argumentPieceSize ?? 4
  const perCall = calls.map((call, index) => {
    const fragments: object[] = [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }]
    for (let start = 0; start < call.arguments.length; start += pieceSize)
      fragments.push({ index, function: { arguments: call.arguments.slice(start, start + pieceSize) } })
    return fragments
  })
  const ordered: object[] = []
  if (options.interleave) {
    const longest = Math.max(0, ...perCall.map((fragments) => fragments.length))
    for (let step = 0; step < longest; step++)
      for (const fragments of perCall) if (fragments[step]) ordered.push(fragments[step] as object)
  } else {
    for (const fragments of perCall) ordered.push(...fragments)
  }
  return [
    openaiChunk({ role: 'assistant', content: null }),
    ...ordered.map((fragment) => openaiChunk({ tool_calls: [fragment] })),
    openaiChunk({}, 'tool_calls'),
    openaiUsageChunk(20, 12),
  ]
}

// ---- Messages API event builders --------------------------------------------------------------------

/** `message_start` with the prompt's usage. */
export function anthropicMessageStart(inputTokens = 10): { event: string; data: object } {
  return {
    event: 'message_start',
    data: {
      type: 'message_start',
      message: {
        id: 'msg_fake',
        type: 'message',
        role: 'assistant',
        model: 'fake-model',
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: inputTokens, output_tokens: 1 },
      },
    },
  }
}

/** `message_delta` (stop reason, output usage) and `message_stop`. */
export function anthropicMessageEnd(stopReason: string, outputTokens = 5): Array<{ event: string; data: object }> {
  return [
    {
      event: 'message_delta',
      data: {
        type: 'message_delta',
        delta: { stop_reason: stopReason, stop_sequence: null },
        usage: { output_tokens: outputTokens },
      },
    },
    { event: 'message_stop', data: { type: 'message_stop' } },
  ]
}

/** A whole text answer: `text` in `pieces` `text_delta`s of one text block. */
export function anthropicTextEvents(text: string, pieces: number): Array<{ event: string; data: object }> {
  const characters = [...text]
  const size = Math.max(1, Math.ceil(characters.length / pieces))
  const deltas: Array<{ event: string; data: object }> = []
  for (let start = 0; start < characters.length; start += size) {
    deltas.push({
      event: 'content_block_delta',
      data: {
        type: 'content_block_delta',
        index: 0,
        delta: { type: 'text_delta', text: characters.slice(start, start + size).join('') },
      },
    })
  }
  return [
    anthropicMessageStart(),
    {
      event: 'content_block_start',
      data: { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    },
    { event: 'ping', data: { type: 'ping' } },
    ...deltas,
    { event: 'content_block_stop', data: { type: 'content_block_stop', index: 0 } },
    ...anthropicMessageEnd('end_turn'),
  ]
}

/** One `tool_use` block at `index` with its input JSON streamed in `input_json_delta` pieces. */
export function anthropicToolUseEvents(
  index: number,
  call: FakeToolCall,
  pieceSize = 5,
): Array<{ event: string; data: object }> {
  const deltas: Array<{ event: string; data: object }> = []
  for (let start = 0; start < call.arguments.length; start += pieceSize) {
    deltas.push({
      event: 'content_block_delta',
      data: {
        type: 'content_block_delta',
        index,
        delta: { type: 'input_json_delta', partial_json: call.arguments.slice(start, start + pieceSize) },
      },
    })
  }
  return [
    {
      event: 'content_block_start',
      data: {
        type: 'content_block_start',
        index,
        content_block: { type: 'tool_use', id: call.id, name: call.name, input: {} },
      },
    },
    ...deltas,
    { event: 'content_block_stop', data: { type: 'content_block_stop', index } },
  ]
}

/** An OpenAI-compatible model `id` that calls `upstream` (a short idle timeout: tests wait for nothing). */
export function fakeOpenAIModel(upstream: FakeUpstream, id: string): OpenAIChatModel {
  return new OpenAIChatModel({
    id,
    model: 'gpt-test',
    baseUrl: `${upstream.url}/v1`,
    apiKey: 'sk-test-secret-key-0123456789',
    contextWindow: 100_000,
    supportsTools: true,
    idleTimeoutMs: 2_000,
  })
}
