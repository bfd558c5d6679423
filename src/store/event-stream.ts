import type { Executor } from './database.js'
import type { EventFeed } from './event-feed.js'
import { readEvents, type EventRecord, type EventScope } from './event-log.js'

export interface EventStreamOptions {
  /** Deliver events with ids above this one (from `Last-Event-ID` or `?after=`). */
  afterId: number
  /** Drops events the reader may not see (applied to replayed and live events alike). */
  filter?: (event: EventRecord) => boolean
  /** Ends the stream. */
  signal?: AbortSignal
  /** Live events held for a reader before it falls back to reading from the table. */
  maxQueued?: number
}

const replayPage = 500

/**
 * One reader's view of the log: replays from the table, then follows the live feed, with no gap
 * and no duplicate. It subscribes before its first read, so anything committed afterwards is in the
 * live queue and anything before is in the table. A reader that falls behind (a slow client) does
 * not hold memory or stall others: its queue is dropped and it goes back to reading the table.
 */
export async function* streamEvents(
  db: Executor,
  feed: EventFeed,
  scope: EventScope,
  options: EventStreamOptions,
): AsyncGenerator<EventRecord> {
  const maxQueued = options.maxQueued ?? 1000
  const filter = options.filter ?? (() => true)
  let cursor = options.afterId
  let queue: EventRecord[] = []
  let fromTable = true
  let overflowed = false
  let wake: (() => void) | null = null
  const notify = (): void => {
    const resolve = wake
    wake = null
    resolve?.()
  }
  const unsubscribe = feed.subscribe(scopeKey(scope), (event) => {
    if (fromTable) {
      // Still replaying: keep a bounded head start; past it, the table is read once more.
      if (queue.length < maxQueued) queue.push(event)
      else overflowed = true
      return
    }
    if (queue.length >= maxQueued) {
      queue = []
      fromTable = true
    } else {
      queue.push(event)
    }
    notify()
  })
  const onAbort = (): void => notify()
  options.signal?.addEventListener('abort', onAbort)
  try {
    while (!options.signal?.aborted) {
      if (fromTable) {
        const page = await readEvents(db, scope, cursor, replayPage)
        for (const event of page) {
          if (options.signal?.aborted) return
          cursor = event.id
          if (filter(event)) yield event
        }
        if (page.length < replayPage) {
          if (overflowed) {
            overflowed = false
            queue = []
          } else {
            fromTable = false
            queue = queue.filter((event) => event.id > cursor)
          }
        }
        continue
      }
      const event = queue.shift()
      if (event) {
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
