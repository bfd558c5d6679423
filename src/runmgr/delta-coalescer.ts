/**
 * Collects streamed text and flushes it at most every `intervalMs`, so a fast model does not turn
 * into one database write per token. `message.delta` stays incremental: each flush carries only the
 * text since the previous one.
 */
export class DeltaCoalescer {
  readonly #intervalMs: number
  readonly #flush: (text: string) => Promise<void>
  #pending = ''
  #timer: NodeJS.Timeout | null = null
  #first: NodeJS.Immediate | null = null
  #chain: Promise<void> = Promise.resolve()
  #sentFirst = false

  constructor(intervalMs: number, flush: (text: string) => Promise<void>) {
    this.#intervalMs = intervalMs
    this.#flush = flush
  }

  push(text: string): void {
    this.#pending += text
    // The first text goes out at once: holding it would add the interval to time-to-first-token.
    // Once what has already arrived is read, though: an answer that came whole (its end is in the
    // same read) then goes out with the turn's end, in one statement instead of two.
    if (!this.#sentFirst) {
      this.#sentFirst = true
      this.#first = setImmediate(() => {
        this.#first = null
        this.#drain()
      })
      return
    }
    if (this.#first) return // goes out with the first
    this.#timer ??= setTimeout(() => {
      this.#timer = null
      this.#drain()
    }, this.#intervalMs)
  }

  /** Flushes what is pending and waits for every flush to finish. */
  async close(): Promise<void> {
    this.#cancel()
    this.#drain()
    await this.#chain
  }

  /**
   * Waits for every flush so far and hands back the text not yet flushed, for the caller to write
   * with its next statement (the turn's end) instead of in one of its own.
   */
  async take(): Promise<string> {
    this.#cancel()
    await this.#chain
    const text = this.#pending
    this.#pending = ''
    return text
  }

  #cancel(): void {
    if (this.#timer) clearTimeout(this.#timer)
    this.#timer = null
    if (this.#first) clearImmediate(this.#first)
    this.#first = null
  }

  #drain(): void {
    const text = this.#pending
    this.#pending = ''
    if (!text) return
    this.#chain = this.#chain.then(() => this.#flush(text)).catch(() => undefined)
  }
}
