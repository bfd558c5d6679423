import type { EventFeed } from './event-feed.js'
import { eventDataJson, readEventPage, type EventRecord, type EventScope } from './event-log.js'
import type { Executor } from './executor.js'

export interface EventStreamOptions {
  /** Deliver events with ids above this one (from `Last-Event-ID` or `?after=`). */
  afterId: number
  /** Drops events the reader may not see (applied to replayed and live events alike). */
  filter?: (event: EventRecord) => boolean
  /** Ends the stream; from then on the reader holds nothing. */
  signal?: AbortSignal
  /** Live events held for a reader before it falls back to reading from the table. */
  maxQueued?: number
  /** Bytes of event data held for a reader (live queue and each replay page). */
  maxQueuedBytes?: number
}

const replayPage = 500
const defaultMaxQueuedBytes = 1024 * 1024

/**
 * One reader's view of the log: replays from the table, then follows the live feed, with no gap
 * and no duplicate. It subscribes before its first read, so anything committed afterwards is in the
 * live queue and anything before is in the table. A reader that falls behind (a slow client) does
 * not hold memory or stall others: past a bound in events or bytes its queue is dropped and it goes
 * back to reading the table, a page of bounded size at a time.
 */
export async function* streamEvents(
  db: Executor,
  feed: EventFeed,
  scope: EventScope,
  options: EventStreamOptions,
): AsyncGenerator<EventRecord> {
  const maxQueued = options.maxQueued ?? 1000
  const maxBytes = options.maxQueuedBytes ?? defaultMaxQueuedBytes
  const filter = options.filter ?? (() => true)
  let cursor = options.afterId
  let queue: EventRecord[] = []
  let queuedBytes = 0
  let fromTable = true
  let overflowed = false
  let wake: (() => void) | null = null
  const notify = (): void => {
    const resolve = wake
    wake = null
    resolve?.()
  }
  const clearQueue = (): void => {
    queue = []
    queuedBytes = 0
  }
  const hasRoom = (event: EventRecord): boolean =>
    queue.length < maxQueued && queuedBytes + eventDataJson(event).length <= maxBytes
  const push = (event: EventRecord): void => {
    queue.push(event)
    queuedBytes += eventDataJson(event).length
  }
  let subscribed = true
  const listener = (event: EventRecord): void => {
    if (fromTable) {
      // Still replaying: keep a bounded head start; past it, the table is read once more.
      if (!overflowed && hasRoom(event)) push(event)
      else overflowed = true
      return
    }
    if (hasRoom(event)) {
      push(event)
    } else {
      clearQueue()
      fromTable = true
    }
    notify()
  }
  const stops = [feed.subscribe(scopeKey(scope), listener)]
  // The catalog's events reach every project and conversation stream (event-log.ts).
  if (!('runId' in scope)) stops.push(feed.subscribe('catalog', listener))
  const stopListening = (): void => {
    for (const stop of stops) stop()
  }
  const unsubscribe = (): void => {
    if (!subscribed) return
    subscribed = false
    stopListening()
    clearQueue()
  }
  // Aborting releases the subscription and the queue at once, even while the consumer is stuck.
  const onAbort = (): void => {
    unsubscribe()
    notify()
  }
  options.signal?.addEventListener('abort', onAbort)
  try {
    if (options.signal?.aborted) return
    while (!options.signal?.aborted) {
      if (fromTable) {
        // A run this instance has followed since it was created replays from memory.
        const recent = 'runId' in scope ? feed.recentRunEvents(scope.runId, cursor) : undefined
        const page = recent
          ? { events: recent, more: false }
          : await readEventPage(db, scope, cursor, replayPage, maxBytes)
        for (const event of page.events) {
          if (options.signal?.aborted) return
          cursor = event.id
          if (filter(event)) yield event
        }
        if (!page.more) {
          if (overflowed) {
            overflowed = false
            clearQueue()
          } else {
            fromTable = false
            queue = queue.filter((event) => event.id > cursor)
            queuedBytes = queue.reduce((sum, event) => sum + eventDataJson(event).length, 0)
          }
        }
        continue
      }
      const event = queue.shift()
      if (event) {
        queuedBytes -= eventDataJson(event).length
        if (event.id <= cursor) continue
        cursor = event.id
        if (filter(event)) yield event
        continue
      }
      await new Promise<void>((resolve) => {
        wake = resolve
      })
    }
  } finally {
    unsubscribe()
    options.signal?.removeEventListener('abort', onAbort)
  }
}

function scopeKey(scope: EventScope): string {
  if ('projectId' in scope) return `project:${scope.projectId}`
  if ('conversationId' in scope) return `conversation:${scope.conversationId}`
  return `run:${scope.runId}`
}
