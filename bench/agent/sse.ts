import { createParser, type EventSourceMessage } from 'eventsource-parser'

/**
 * Reads a server-sent-event body to its end, calling `onEvent` with each event as soon as its bytes
 * arrive. `onEvent` returning true stops reading (and cancels the body).
 */
export async function readEventStream(
  body: ReadableStream<Uint8Array> | null,
  onEvent: (event: EventSourceMessage) => boolean | void,
): Promise<void> {
  if (!body) throw new Error('response without a body')
  let stop = false
  const parser = createParser({
    onEvent: (event) => {
      if (!stop && onEvent(event) === true) stop = true
    },
  })
  const decoder = new TextDecoder()
  const reader = body.getReader()
  try {
    while (!stop) {
      const { done, value } = await reader.read()
      if (done) break
      parser.feed(decoder.decode(value, { stream: true }))
    }
  } finally {
    if (stop) await reader.cancel().catch(() => undefined)
    reader.releaseLock()
  }
}
