import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks'
import { Counter, Gauge, type Registry } from 'prom-client'
import { AdmissionLimit } from './admission-limit.js'

/** When an instance refuses new runs (docs/guides/scaling.md#overload). */
export interface OverloadSettings {
  /** Event-loop delay (ms) past which new runs are refused; 0: never refused. */
  maxEventLoopDelayMs: number
  /**
   * How long (ms) a trivial statement may wait for the database (its queue, the pool, the server) before
   * new runs are refused; 0: not measured.
   */
  maxDatabaseWaitMs: number
  /**
   * How long (ms) accepting a new run may take — the oldest run-creating request in flight, or one
   * answered in the last two seconds — before further ones are refused; 0: not measured.
   */
  maxAdmitMs: number
  /** How many runs one instance drives at once before new ones are refused; 0: no cap. */
  maxActiveRuns: number
  /**
   * Under pressure (the event loop or the database a quarter of their limits late), runs in flight
   * are capped at this many seconds of the runs the instance completes; 0: no cap of its own.
   */
  adaptiveCapSeconds: number
  /** What Retry-After says to a refused client, seconds. */
  retryAfterSeconds: number
}

export const defaultOverloadSettings: OverloadSettings = {
  maxEventLoopDelayMs: 2000,
  maxDatabaseWaitMs: 1000,
  // Off by default: a creation that carries large files is slow for its own reasons.
  maxAdmitMs: 0,
  maxActiveRuns: 256,
  adaptiveCapSeconds: 2,
  retryAfterSeconds: 2,
}

/** What the guard reads of the runs: how many are driven now, and how many drives ended since the start. */
export interface RunLoad {
  driven: number
  ended: number
}

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
  #probe: (() => Promise<unknown>) | undefined
  #runs: (() => RunLoad) | undefined
  #limit: AdmissionLimit | undefined
  /** When the probe in flight was sent (0: none), and how long the last one took. */
  #probeSentAt = 0
  #lastProbeMs = 0
  /**
   * Plain run-creating requests being answered (their start, their conversation): in flight already,
   * since a burst of them would otherwise all pass the cap before any run is driven. And the last one
   * answered (when, how long).
   */
  readonly #admitting = new Map<string, { at: number; conversation: string | undefined }>()
  /**
   * Requests being answered per conversation: a conversation runs one run at a time, so concurrent
   * creations there add one run at most — the others are answered 409 run_active, not refused as overload.
   */
  readonly #admittingIn = new Map<string, number>()
  /** New runs refused as overload since the start. */
  refusedCount = 0
  #lastAdmit = { at: 0, ms: 0 }

  constructor(settings: OverloadSettings) {
    this.settings = settings
    this.#histogram = monitorEventLoopDelay({ resolution: 10 })
  }

  /**
   * Starts measuring. `probe` runs a trivial statement: the event loop can be on time while the work
   * waits elsewhere — behind the embedded database's queue (one thread does the server's and the
   * database's work in slices), or for a pooled connection — so its wait is measured too.
   */
  start(probe?: () => Promise<unknown>, runs?: () => RunLoad): void {
    if (this.#timer) return
    const { maxEventLoopDelayMs, maxDatabaseWaitMs, maxActiveRuns, adaptiveCapSeconds, maxAdmitMs } = this.settings
    const loop = maxEventLoopDelayMs > 0
    this.#probe = maxDatabaseWaitMs > 0 ? probe : undefined
    // Pressure is read from the loop and the database: with neither measured there is none to adapt to.
    const adaptive = adaptiveCapSeconds > 0 && (loop || this.#probe !== undefined)
    this.#runs = maxActiveRuns > 0 || adaptive ? runs : undefined
    if (this.#runs && adaptive) this.#limit = new AdmissionLimit(maxActiveRuns, adaptiveCapSeconds)
    if (!loop && !this.#probe && !this.#runs && maxAdmitMs <= 0) return
    if (loop) this.#histogram.enable()
    let windowStart = performance.now()
    this.#timer = setInterval(() => {
      this.#previousMs = this.#histogram.max / 1e6
      this.#histogram.reset()
      // The window as it was: under pressure the timer itself fires late, and the rate must not count that.
      const now = performance.now()
      const elapsedMs = Math.max(1, now - windowStart)
      windowStart = now
      if (this.#limit && this.#runs) {
        const pressure =
          (loop && this.#previousMs > maxEventLoopDelayMs / 4) ||
          (this.#probe !== undefined && this.databaseWaitMs > maxDatabaseWaitMs / 4)
        this.#limit.update({ ...this.#inFlight(), pressure, windowMs: elapsedMs })
      }
      this.#sendProbe()
    }, windowMs)
    this.#timer.unref()
  }

  stop(): void {
    clearInterval(this.#timer)
    this.#timer = undefined
    this.#histogram.disable()
  }

  #sendProbe(): void {
    if (!this.#probe || this.#probeSentAt > 0) return
    const sent = performance.now()
    this.#probeSentAt = sent
    this.#probe()
      .catch(() => undefined) // a database that does not answer is /readyz's concern, not overload
      .finally(() => {
        this.#lastProbeMs = performance.now() - sent
        this.#probeSentAt = 0
      })
  }

  /** A plain run-creating request was let in (`key`: the request's id; `conversation`: where it starts a run). */
  admitStarted(key: string, conversation?: string): void {
    if (this.#admitting.has(key)) return
    this.#admitting.set(key, { at: performance.now(), conversation })
    if (conversation !== undefined) this.#admittingIn.set(conversation, (this.#admittingIn.get(conversation) ?? 0) + 1)
  }

  /** It was answered (or abandoned). */
  admitEnded(key: string): void {
    const admitting = this.#admitting.get(key)
    if (admitting === undefined) return
    this.#admitting.delete(key)
    const { conversation } = admitting
    if (conversation !== undefined) {
      const left = (this.#admittingIn.get(conversation) ?? 1) - 1
      if (left > 0) this.#admittingIn.set(conversation, left)
      else this.#admittingIn.delete(conversation)
    }
    const now = performance.now()
    this.#lastAdmit = { at: now, ms: now - admitting.at }
  }

  /** How long accepting a run takes now: the oldest one in flight, or the last answered within 2 s, ms. */
  get admitMs(): number {
    const now = performance.now()
    let oldest = 0
    // Insertion order: the first entry is the oldest.
    for (const { at } of this.#admitting.values()) {
      oldest = now - at
      break
    }
    return Math.max(oldest, now - this.#lastAdmit.at < 2 * windowMs ? this.#lastAdmit.ms : 0)
  }

  /** The longest event-loop delay of this window and the one before, ms. */
  get delayMs(): number {
    return Math.max(this.#previousMs, this.#histogram.max / 1e6)
  }

  /** How long the last probe waited for the database, or the one in flight has waited so far, ms. */
  get databaseWaitMs(): number {
    const inFlight = this.#probeSentAt > 0 ? performance.now() - this.#probeSentAt : 0
    return Math.max(this.#lastProbeMs, inFlight)
  }

  /** Runs in flight: driven here, or being accepted (one per conversation at most); and the drives ended so far. */
  #inFlight(): { inFlight: number; ended: number } {
    const load = this.#runs?.() ?? { driven: 0, ended: 0 }
    let accepting = this.#admittingIn.size
    for (const { conversation } of this.#admitting.values()) if (conversation === undefined) accepting++
    return { inFlight: load.driven + accepting, ended: load.ended }
  }

  /** Runs in flight now: driven here, or being accepted. */
  get runsInFlight(): number {
    return this.#inFlight().inFlight
  }

  /** The cap on runs in flight now: the operator's, or the lower one the instance set itself (infinite: none). */
  get activeRunLimit(): number {
    const operator = this.settings.maxActiveRuns > 0 ? this.settings.maxActiveRuns : Number.POSITIVE_INFINITY
    return Math.min(operator, this.#limit?.limit ?? operator)
  }

  /** Why a new run should be refused now, or undefined when it should not. */
  get overloadReason(): string | undefined {
    return this.reasonToRefuse()
  }

  /** Whether the runs in flight are at the cap now (a new run elsewhere would be refused for it). */
  get atCap(): boolean {
    return this.#timer !== undefined && this.#runs !== undefined && this.#inFlight().inFlight >= this.activeRunLimit
  }

  /**
   * Why a new run in `conversation` should be refused now, or undefined. A conversation runs one run at
   * a time: a creation where another is being accepted, or where a run is active (`runThere`), adds no
   * run in flight, so the cap does not refuse it (it is answered 409 run_active, queued, or replaces the
   * active run); a late loop or database still does.
   */
  reasonToRefuse(conversation?: string, runThere = false): string | undefined {
    if (this.#timer === undefined) return undefined
    const { maxEventLoopDelayMs, maxDatabaseWaitMs, maxAdmitMs, maxActiveRuns } = this.settings
    const counted = runThere || (conversation !== undefined && this.#admittingIn.has(conversation))
    if (this.#runs && !counted) {
      const { inFlight } = this.#inFlight()
      const limit = this.activeRunLimit
      if (inFlight >= limit)
        return limit < maxActiveRuns || maxActiveRuns === 0
          ? `${inFlight} runs in flight; it takes ${limit} while late, ${this.settings.adaptiveCapSeconds} s of the ${this.#limit!.rate.toFixed(1)} runs/s it completes`
          : `it drives ${inFlight} runs, its limit`
    }
    if (maxEventLoopDelayMs > 0 && this.delayMs > maxEventLoopDelayMs)
      return `its event loop runs ${Math.round(this.delayMs)} ms late`
    if (this.#probe && this.databaseWaitMs > maxDatabaseWaitMs)
      return `a statement waits ${Math.round(this.databaseWaitMs)} ms for the database`
    if (maxAdmitMs > 0 && this.admitMs > maxAdmitMs) return `accepting a run takes ${Math.round(this.admitMs)} ms`
    return undefined
  }

  /** Whether a new run should be refused now. */
  get overloaded(): boolean {
    return this.overloadReason !== undefined
  }
}

/**
 * What the guard sees, on `/metrics`: runs in flight, the cap now (the operator's or the instance's own;
 * +Inf: none), and the runs refused as overload.
 */
export function registerOverloadMetrics(guard: OverloadGuard, registry: Registry): void {
  new Gauge({
    name: 'plinth_runs_in_flight',
    help: 'Runs this instance drives or is accepting now',
    registers: [registry],
    collect() {
      this.set(guard.runsInFlight)
    },
  })
  new Gauge({
    name: 'plinth_run_cap',
    help: 'Runs in flight past which new ones are refused now (the operator cap, or the lower one the instance set itself under pressure)',
    registers: [registry],
    collect() {
      this.set(guard.activeRunLimit)
    },
  })
  new Counter({
    name: 'plinth_runs_refused_overloaded_total',
    help: 'New runs refused 503 overloaded',
    registers: [registry],
    collect() {
      this.reset()
      this.inc(guard.refusedCount)
    },
  })
}
