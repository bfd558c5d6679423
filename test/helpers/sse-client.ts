import { createParser, type EventSourceMessage } from 'eventsource-parser'

export interface SseEvent {
  id: string | undefined
  event: string | undefined
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary JSON
  data: any
}

export interface SseConnection {
  status: number
  headers: Headers
  /** Raw text received so far (heartbeat comments included). */
  raw(): string
  /** Waits until `count` events have arrived in total; returns all received so far. */
  waitFor(count: number, timeoutMs?: number): Promise<SseEvent[]>
  /** Waits until an event matching `match` has arrived (received before the call count); returns the first. */
  waitForEvent(match: (event: SseEvent) => boolean, options?: { timeoutMs?: number; what?: string }): Promise<SseEvent>
  events: SseEvent[]
  /** Resolves when the server ends the stream. */
  ended: Promise<void>
  close(): void
}

/** Opens an SSE stream with fetch and parses it with eventsource-parser, as a browser would. */
export async function openSse(
  url: string,
  options: { token?: string; lastEventId?: string; headers?: Record<string, string> } = {},
): Promise<SseConnection> {
  const controller = new AbortController()
  const headers: Record<string, string> = { accept: 'text/event-stream', ...options.headers }
  if (options.token) headers.authorization = `Bearer ${options.token}`
  if (options.lastEventId !== undefined) headers['last-event-id'] = options.lastEventId
  const response = await fetch(url, { headers, signal: controller.signal })
  const events: SseEvent[] = []
  let raw = ''
  let waiters: Array<() => void> = []
  const wakeAll = (): void => {
    const current = waiters
    waiters = []
    for (const wake of current) wake()
  }
  const parser = createParser({
    onEvent(message: EventSourceMessage) {
      let data: unknown = message.data
      try {
        data = JSON.parse(message.data)
      } catch {
        // keep text
      }
      events.push({ id: message.id, event: message.event, data })
      wakeAll()
    },
  })
  let ended: Promise<void> = Promise.resolve()
  if (response.body && response.status === 200) {
    const reader = response.body.getReader()
    const decoder = new TextDecoder()
    ended = (async () => {
      try {
        for (;;) {
          const { done, value } = await reader.read()
          if (done) break
          const text = decoder.decode(value, { stream: true })
          raw += text
          parser.feed(text)
          wakeAll()
        }
      } catch {
        // aborted by close()
      } finally {
        wakeAll()
      }
    })()
  }
  let finished = false
  void ended.then(() => {
    finished = true
  })
  // Wakes on each event (or the stream's end) rather than polling.
  const waitUntil = async (done: () => boolean, timeoutMs: number, what: () => string): Promise<void> => {
    const deadline = Date.now() + timeoutMs
    while (!done()) {
      if (finished)
        throw new Error(`stream ended before ${what()}: ${JSON.stringify(events.map((event) => event.event))}`)
      const remaining = deadline - Date.now()
      if (remaining <= 0)
        throw new Error(
          `timed out waiting for ${what()}; got ${events.length} events: ${JSON.stringify(events.map((event) => event.event))}`,
        )
      await new Promise<void>((wake) => {
        const timer = setTimeout(wake, remaining)
        waiters.push(() => {
          clearTimeout(timer)
          wake()
        })
      })
    }
  }
  return {
    status: response.status,
    headers: response.headers,
    raw: () => raw,
    events,
    ended,
    async waitFor(count, timeoutMs = 5000) {
      await waitUntil(
        () => events.length >= count,
        timeoutMs,
        () => `${count} events`,
      )
      return events
    },
    async waitForEvent(match, { timeoutMs = 15_000, what = 'a matching event' } = {}) {
      await waitUntil(
        () => events.some(match),
        timeoutMs,
        () => what,
      )
      return events.find(match)!
    },
    close: () => controller.abort(),
  }
}
