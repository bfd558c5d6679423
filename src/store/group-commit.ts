interface Waiting<I, R> {
  item: I
  resolve: (result: R) => void
  reject: (error: unknown) => void
}

export interface GroupCommitOptions<I, R> {
  /** How much of the group's budget an item takes (default 1). */
  size?: (item: I) => number
  /** A group's budget: items in arrival order until it is spent (at least one item). */
  maxSize?: number
  /** Runs after a group's statement, before any of its callers is answered. */
  committed?: (results: R[]) => void
}

/**
 * Group commit (docs/architecture.md#the-event-log): one statement is in flight at a time, and the items
 * that arrive meanwhile share the next one. Alone, an item goes at once; under load, many callers cost
 * one statement, one lock of what they all take, one commit and one flush.
 */
export class GroupCommit<I, R> {
  readonly #write: (items: I[]) => Promise<R[]>
  readonly #size: (item: I) => number
  readonly #maxSize: number
  readonly #committed: ((results: R[]) => void) | undefined
  #queue: Waiting<I, R>[] = []
  #inFlight = false

  /** `write` runs one statement for a group and answers each item, in its order. */
  constructor(write: (items: I[]) => Promise<R[]>, options: GroupCommitOptions<I, R> = {}) {
    this.#write = write
    this.#size = options.size ?? (() => 1)
    this.#maxSize = options.maxSize ?? 500
    this.#committed = options.committed
  }

  submit(item: I): Promise<R> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ item, resolve, reject })
      if (!this.#inFlight) void this.#drain()
    })
  }

  async #drain(): Promise<void> {
    this.#inFlight = true
    try {
      while (this.#queue.length > 0) {
        const group = this.#take()
        try {
          this.#settle(group, await this.#write(group.map((waiting) => waiting.item)))
        } catch (error) {
          // A statement the server refused wrote nothing: each item is tried on its own, so one bad
          // item fails alone. A lost connection may have committed: those fail as they are.
          if (group.length === 1 || !refusedByServer(error)) for (const waiting of group) waiting.reject(error)
          else for (const waiting of group) await this.#alone(waiting)
        }
      }
    } finally {
      this.#inFlight = false
    }
  }

  async #alone(waiting: Waiting<I, R>): Promise<void> {
    try {
      this.#settle([waiting], await this.#write([waiting.item]))
    } catch (error) {
      waiting.reject(error)
    }
  }

  #settle(group: Waiting<I, R>[], results: R[]): void {
    this.#committed?.(results)
    group.forEach((waiting, index) => waiting.resolve(results[index]!))
  }

  /** The next group: items in arrival order, up to `maxSize` (at least one item). */
  #take(): Waiting<I, R>[] {
    let count = 0
    let taken = 0
    while (taken < this.#queue.length) {
      const size = this.#size(this.#queue[taken]!.item)
      if (taken > 0 && count + size > this.#maxSize) break
      count += size
      taken++
    }
    return this.#queue.splice(0, taken)
  }
}

/** An error the database answered with (a SQLSTATE): its statement was rolled back. */
function refusedByServer(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)
}
