import { createParser, type EventSourceMessage } from 'eventsource-parser'
import { unreachable } from './errors.js'

/** One SSE frame as sent: its `event:` name, `id:` and the raw `data:`. */
export interface SseFrame {
  event: string
  id: string | null
  data: string
}

/**
 * The frames of an SSE body, in order, read with `eventsource-parser` (comments and heartbeats
 * dropped). Ends when the body ends; a connection lost mid-body is a PlinthError `unreachable`.
 * Reading stops (and the body is cancelled) when the caller stops.
 */
export async function* sseFrames(body: ReadableStream<Uint8Array>, source: string): AsyncGenerator<SseFrame> {
  const queue: EventSourceMessage[] = []
  const parser = createParser({ onEvent: (message) => queue.push(message) })
  const decoder = new TextDecoder()
  const reader = body.getReader()
  try {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>
      try {
        chunk = await reader.read()
      } catch (error) {
        throw unreachable(source, error)
      }
      if (chunk.done) break
      parser.feed(decoder.decode(chunk.value, { stream: true }))
      for (const message of queue.splice(0))
        yield { event: message.event ?? 'message', id: message.id ?? null, data: message.data }
    }
  } finally {
    await reader.cancel().catch(() => undefined)
  }
}
