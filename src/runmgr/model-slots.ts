/**
 * The limit on concurrent model calls (`PLINTH_LLM_CONCURRENCY`), shared fairly between users
 * (docs/security.md, "fair model slots"): one user holds at most `perUser` slots, so others always find
 * room; a freed slot goes to the waiting user who holds the fewest (oldest waiter first among equals),
 * and each user's own calls are served in order. A waiter whose signal aborts leaves the queue and never
 * holds a slot, so a cancelled run cannot take (and leak) a slot that a later release hands out.
 */
export class ModelSlots {
  readonly #limit: number
  readonly #perUser: number
  #inUse = 0
  readonly #held = new Map<string, number>()
  /** Waiters in arrival order (each knows its user). */
  readonly #waiters: Array<{ userId: string; grant: () => void }> = []

  constructor(limit: number, perUser = Math.max(1, Math.ceil(limit / 2))) {
    this.#limit = limit
    this.#perUser = Math.max(1, Math.min(perUser, limit))
  }

  /** Resolves true holding a slot for `userId` (release it with the same id), or false when `signal` aborted first. */
  acquire(signal: AbortSignal, userId = ''): Promise<boolean> {
    if (signal.aborted) return Promise.resolve(false)
    if (this.#mayTake(userId) && !this.#waiters.some((waiter) => waiter.userId === userId)) {
      this.#take(userId)
      return Promise.resolve(true)
    }
    return new Promise<boolean>((resolve) => {
      const entry = {
        userId,
        grant: (): void => {
          signal.removeEventListener('abort', leave)
          resolve(true)
        },
      }
      const leave = (): void => {
        const index = this.#waiters.indexOf(entry)
        if (index >= 0) this.#waiters.splice(index, 1)
        resolve(false)
      }
      signal.addEventListener('abort', leave, { once: true })
      this.#waiters.push(entry)
    })
  }

  /** Frees `userId`'s slot and hands slots to waiters who may take them, fewest-held first. */
  release(userId = ''): void {
    this.#inUse = Math.max(0, this.#inUse - 1)
    const held = (this.#held.get(userId) ?? 1) - 1
    if (held <= 0) this.#held.delete(userId)
    else this.#held.set(userId, held)
    this.#dispatch()
  }

  #mayTake(userId: string): boolean {
    return this.#inUse < this.#limit && (this.#held.get(userId) ?? 0) < this.#perUser
  }

  #take(userId: string): void {
    this.#inUse++
    this.#held.set(userId, (this.#held.get(userId) ?? 0) + 1)
  }

  #dispatch(): void {
    while (this.#inUse < this.#limit) {
      // The first waiter of each user who may take a slot; of those, the user holding the fewest.
      let chosen = -1
      const seen = new Set<string>()
      for (let index = 0; index < this.#waiters.length; index++) {
        const { userId } = this.#waiters[index]!
        if (seen.has(userId)) continue
        seen.add(userId)
        if (!this.#mayTake(userId)) continue
        if (chosen < 0 || (this.#held.get(userId) ?? 0) < (this.#held.get(this.#waiters[chosen]!.userId) ?? 0))
          chosen = index
      }
      if (chosen < 0) return
      const [entry] = this.#waiters.splice(chosen, 1)
      this.#take(entry!.userId)
      entry!.grant()
    }
  }

  /** Waiting calls (for metrics and tests). */
  get waiting(): number {
    return this.#waiters.length
  }
}
