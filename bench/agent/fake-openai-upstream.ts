/**
 * An instant OpenAI-compatible upstream for the agent-round bench: `POST /v1/chat/completions`
 * (stream) in the real wire format (`data: {json}\n\n` frames, usage chunk, `data: [DONE]`), each
 * frame its own write, no delays unless the model name asks for them.
 *
 * - Last message from the user → one `get_weather` call, arguments `{"city":"Paris"}` in 3 chunks,
 *   `finish_reason: "tool_calls"`.
 * - Last message a tool result → the answer in 20 text chunks (`finish_reason: "stop"`). If the tool
 *   result is not the bench tool's constant, the answer says so (the bench checks the text).
 * - Model `paced-<N>x<M>ms` → the answer in N chunks, M ms apart (time to first token, fan-out).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export const toolName = 'get_weather'
export const toolArgumentPieces = ['{"city"', ':"Par', 'is"}'] as const
export const toolResultMarker = '"tempC":21'
export const answerPieces = 'It is 21 °C and clear in Paris right now, a fine day for a walk along the Seine river.'
  .split(' ')
  .map((word, index, words) => (index < words.length - 1 ? `${word} ` : word))
export const answerText = answerPieces.join('')

interface ChatRequest {
  model?: unknown
  messages?: Array<{ role?: unknown; content?: unknown }>
}

let sequence = 0

/** The frames of one streamed answer (`pace`: ms before each text chunk after the first). */
export function answerFrames(request: ChatRequest): { frames: string[]; paceMs: number } {
  const model = typeof request.model === 'string' ? request.model : 'm'
  const id = `chatcmpl-bench-${++sequence}`
  const frame = (delta: object, finishReason: string | null = null): string =>
    `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1_700_000_000, model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }] })}\n\n`
  const usage = (completionTokens: number): string =>
    `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1_700_000_000, model, choices: [], usage: { prompt_tokens: 120, completion_tokens: completionTokens, total_tokens: 120 + completionTokens } })}\n\n`
  const done = 'data: [DONE]\n\n'
  const last = request.messages?.at(-1)

  if (last?.role !== 'tool') {
    return {
      paceMs: 0,
      frames: [
        frame({
          role: 'assistant',
          content: null,
          tool_calls: [
            { index: 0, id: `call_${sequence}`, type: 'function', function: { name: toolName, arguments: '' } },
          ],
        }),
        ...toolArgumentPieces.map((piece) => frame({ tool_calls: [{ index: 0, function: { arguments: piece } }] })),
        frame({}, 'tool_calls'),
        usage(12),
        done,
      ],
    }
  }
  const paced = /^paced-(\d+)x(\d+)ms$/.exec(model)
  const count = paced ? Number(paced[1]) : answerPieces.length
  const pieces = String(last.content ?? '').includes(toolResultMarker)
    ? Array.from({ length: count }, (_, index) => answerPieces[index % answerPieces.length] ?? '')
    : [`unexpected tool result: ${String(last.content).slice(0, 200)}`]
  return {
    paceMs: paced ? Number(paced[2]) : 0,
    frames: [
      frame({ role: 'assistant', content: '' }),
      ...pieces.map((piece) => frame({ content: piece })),
      frame({}, 'stop'),
      usage(pieces.length),
      done,
    ],
  }
}

async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
  const chunks: Buffer[] = []
  for await (const chunk of request) chunks.push(chunk as Buffer)
  if (request.method !== 'POST' || request.url !== '/v1/chat/completions') {
    response.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"not found"}}')
    return
  }
  let body: ChatRequest
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as ChatRequest
  } catch {
    response.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"invalid JSON"}}')
    return
  }
  const { frames, paceMs } = answerFrames(body)
  response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  for (const [index, frame] of frames.entries()) {
    // Pacing applies between text chunks: frames 2.. up to the finish frame (the first frame is the role).
    if (paceMs > 0 && index >= 2 && index < frames.length - 3)
      await new Promise((resolve) => setTimeout(resolve, paceMs))
    response.write(frame)
  }
  response.end()
}

/** Listens on 127.0.0.1 (a free port); `url` is the base URL to configure (`…/v1`). */
export async function startFakeOpenAIUpstream(): Promise<{ url: string; server: Server; close(): Promise<void> }> {
  const server = createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      if (!response.headersSent) response.writeHead(500).end(String(error))
      else response.destroy()
    })
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/v1`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
