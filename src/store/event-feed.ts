import { eventDataJson, isCatalogEvent, lastEventId, readAllEvents, type EventRecord } from './event-log.js'
import type { Executor } from './executor.js'

/** Starts listening for commit notifications (with their payload); returns a function that stops. */
export type NotificationSource = (onNotify: (payload?: string) => void) => Promise<() => Promise<void>>

/** Receives live events for one scope key; must not block. */
export type FeedListener = (event: EventRecord) => void

const pageSize = 1000

/**
 * Bounds of the runs' recent events kept for replay, in estimated heap bytes (each event's data JSON
 * counted twice, for the parsed data and its cached JSON, plus the record): per run, and in all. A
 * run of a few rounds keeps a few KB, so the newest ~1,000 runs are kept.
 */
const recentPerRunBytes = 128 * 1024
const recentTotalBytes = 4 * 1024 * 1024

/**
 * The live side of the event log: one reader per server instance that, woken by a commit
 * notification (LISTEN/NOTIFY, so other instances' writes arrive too), reads the new rows once and
 * fans them out to in-process listeners by scope key. Readers never see a gap because ids become
 * visible in commit order (event-log.ts); a periodic poll covers lost notifications.
 *
 * Events committed by this instance's own transactions are handed over directly (`deliverCommitted`)
 * when they continue the sequence, and the notification they tagged is then ignored, so a local
 * commit costs no read.
 */
export class EventFeed {
  readonly #db: Executor
  readonly #source: NotificationSource
  readonly #pollMs: number
  readonly #listeners = new Map<string, Set<FeedListener>>()
  #lastId = 0
  #reading: Promise<void> | null = null
  #readAgain = false
  #stop: (() => Promise<void>) | null = null
  #timer: NodeJS.Timeout | null = null
  #closed = false
  // Each run's events since its `run.created`, as this feed delivered them (see `recentRunEvents`).
  readonly #recent = new Map<string, { events: EventRecord[]; bytes: number }>()
  #recentBytes = 0

  /** The NOTIFY payload of this instance's tracked transactions. */
  readonly tag: string

  constructor(db: Executor, source: NotificationSource, options: { pollMs?: number; tag?: string } = {}) {
    this.#db = db
    this.#source = source
    this.#pollMs = options.pollMs ?? 5000
    this.tag = options.tag ?? `i${process.pid}.${Math.random().toString(36).slice(2, 10)}`
  }

  async start(): Promise<void> {
    this.#lastId = await lastEventId(this.#db)
    this.#stop = await this.#source((payload) => {
      if (payload !== this.tag) this.poke()
    })
    this.#timer = setInterval(() => this.poke(), this.#pollMs)
    this.#timer.unref()
  }

  /** The highest id this feed has delivered. */
  get lastId(): number {
    return this.#lastId
  }

  /** Registers a listener for `project:<id>`, `conversation:<id>`, `run:<id>` or `catalog`. Returns the unsubscribe. */
  subscribe(scopeKey: string, listener: FeedListener): () => void {
    let set = this.#listeners.get(scopeKey)
    if (!set) {
      set = new Set()
      this.#listeners.set(scopeKey, set)
    }
    set.add(listener)
    return () => {
      const current = this.#listeners.get(scopeKey)
      if (!current) return
      current.delete(listener)
      if (current.size === 0) this.#listeners.delete(scopeKey)
    }
  }

  /** Reads whatever was committed since the last read; concurrent pokes coalesce into one more read. */
  poke(): void {
    if (this.#closed) return
    if (this.#reading) {
      this.#readAgain = true
      return
    }
    this.#reading = this.#readNew().finally(() => {
      this.#reading = null
      if (this.#readAgain) {
        this.#readAgain = false
        this.poke()
      }
    })
  }

  /**
   * Events this instance just committed (in id order). Delivered at once when they continue what was
   * delivered; after a gap (another instance's commit, an id lost to a rollback) the table is read.
   */
  deliverCommitted(events: readonly EventRecord[]): void {
    if (this.#closed) return
    for (const event of events) {
      if (event.id <= this.#lastId) continue
      if (event.id !== this.#lastId + 1) {
        this.poke()
        return
      }
      this.#lastId = event.id
      this.#deliver(event)
    }
  }

  /**
   * A run's events after `afterId`, when this feed has delivered every one of them — it saw the run
   * created and has kept its events since (within bounds; the oldest runs are let go first) — so a
   * stream opened on it replays from memory instead of the table; `undefined` otherwise. Taken in
   * the same turn as a subscription, it leaves no gap: later events reach the subscriber.
   */
  recentRunEvents(runId: string, afterId: number): EventRecord[] | undefined {
    const entry = this.#recent.get(runId)
    if (!entry) return undefined
    const first = entry.events.findIndex((event) => event.id > afterId)
    return first < 0 ? [] : entry.events.slice(first)
  }

  /** Resolves once everything committed before the call has been delivered. */
  async flush(): Promise<void> {
    this.poke()
    while (this.#reading) await this.#reading
  }

  async close(): Promise<void> {
    this.#closed = true
    if (this.#timer) clearInterval(this.#timer)
    await this.#stop?.()
    while (this.#reading) await this.#reading
    this.#listeners.clear()
    this.#recent.clear()
  }

  #remember(runId: string, event: EventRecord): void {
    let entry = this.#recent.get(runId)
    if (!entry) {
      // Only from a run's first event on is the record complete.
      if (event.type !== 'run.created') return
      entry = { events: [], bytes: 0 }
      this.#recent.set(runId, entry)
    }
    const size = 2 * eventDataJson(event).length + 300
    if (entry.bytes + size > recentPerRunBytes) {
      // Too long to keep: its streams read the table (it is not taken up again).
      this.#forget(runId, entry)
      return
    }
    entry.events.push(event)
    entry.bytes += size
    this.#recentBytes += size
    for (const [oldest, kept] of this.#recent) {
      if (this.#recentBytes <= recentTotalBytes) break
      this.#forget(oldest, kept)
    }
  }

  #forget(runId: string, entry: { bytes: number }): void {
    this.#recent.delete(runId)
    this.#recentBytes -= entry.bytes
  }

  async #readNew(): Promise<void> {
    try {
      for (;;) {
        const events = await readAllEvents(this.#db, this.#lastId, pageSize)
        for (const event of events) {
          if (event.id <= this.#lastId) continue // delivered locally meanwhile
          this.#lastId = event.id
          this.#deliver(event)
        }
        if (events.length < pageSize) return
      }
    } catch {
      // The database is unreachable for a moment; the next notification or poll retries from #lastId.
    }
  }

  #deliver(event: EventRecord): void {
    if (event.runId) this.#remember(event.runId, event)
    const keys = [
      event.projectId && `project:${event.projectId}`,
      event.conversationId && `conversation:${event.conversationId}`,
      event.runId && `run:${event.runId}`,
      isCatalogEvent(event) && 'catalog',
    ]
    for (const key of keys) {
      if (!key) continue
      const set = this.#listeners.get(key)
      if (!set) continue
      for (const listener of set) listener(event)
    }
  }
}
