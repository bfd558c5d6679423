import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks'

/** When an instance refuses new runs (docs/guides/scaling.md#overload). */
export interface OverloadSettings {
  /** Event-loop delay (ms) past which new runs are refused; 0: never refused. */
  maxEventLoopDelayMs: number
  /** What Retry-After says to a refused client, seconds. */
  retryAfterSeconds: number
}

export const defaultOverloadSettings: OverloadSettings = { maxEventLoopDelayMs: 2000, retryAfterSeconds: 2 }

/** Routes that start runs: refused first when the instance is past its capacity (full URLs, as Fastify names them). */
export const runStartingRoutes: ReadonlySet<string> = new Set(['/api/conversations/:id/runs'])

const windowMs = 1000

/**
 * Measures how late the event loop runs, in windows of a second: an instance whose loop is seconds
 * late is past what it can do (every request, stream and run on it is late by as much), and a new run
 * would make it later. Such a run is refused at once — 503 with Retry-After, before any work — rather
 * than accepted and left to time out; what is already running goes on.
 */
export class OverloadGuard {
  readonly settings: OverloadSettings
  readonly #histogram: IntervalHistogram
  #previousMs = 0
  #timer: NodeJS.Timeout | undefined

  constructor(settings: OverloadSettings) {
    this.settings = settings
    this.#histogram = monitorEventLoopDelay({ resolution: 10 })
  }

  start(): void {
    if (this.settings.maxEventLoopDelayMs <= 0 || this.#timer) return
    this.#histogram.enable()
    this.#timer = setInterval(() => {
      this.#previousMs = this.#histogram.max / 1e6
      this.#histogram.reset()
    }, windowMs)
    this.#timer.unref()
  }

  stop(): void {
    clearInterval(this.#timer)
    this.#timer = undefined
    this.#histogram.disable()
  }

  /** The longest event-loop delay of this window and the one before, ms. */
  get delayMs(): number {
    return Math.max(this.#previousMs, this.#histogram.max / 1e6)
  }

  /** Whether a new run should be refused now. */
  get overloaded(): boolean {
    return this.#timer !== undefined && this.delayMs > this.settings.maxEventLoopDelayMs
  }
}
