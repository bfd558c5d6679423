/**
 * The global limit on concurrent model calls (`PLINTH_LLM_CONCURRENCY`): a fair FIFO semaphore. A
 * waiter whose signal aborts leaves the queue and never holds a slot, so a cancelled run cannot take
 * (and leak) a slot that a later release hands out.
 */
export class ModelSlots {
  #free: number
  readonly #waiters: Array<() => void> = []

  constructor(limit: number) {
    this.#free = limit
  }

  /** Resolves true holding a slot (release it), or false when `signal` aborted first (holding none). */
  acquire(signal: AbortSignal): Promise<boolean> {
    if (signal.aborted) return Promise.resolve(false)
    if (this.#free > 0) {
      this.#free--
      return Promise.resolve(true)
    }
    return new Promise<boolean>((resolve) => {
      const grant = (): void => {
        signal.removeEventListener('abort', leave)
        resolve(true)
      }
      const leave = (): void => {
        const index = this.#waiters.indexOf(grant)
        if (index >= 0) this.#waiters.splice(index, 1)
        resolve(false)
      }
      signal.addEventListener('abort', leave, { once: true })
      this.#waiters.push(grant)
    })
  }

  /** Hands the slot to the longest waiter, or frees it. */
  release(): void {
    const next = this.#waiters.shift()
    if (next) next()
    else this.#free++
  }

  /** Waiting calls (for metrics and tests). */
  get waiting(): number {
    return this.#waiters.length
  }
}
