/** One window's view of an instance's runs, for {@link AdmissionLimit.update}. */
export interface AdmissionSample {
  /** Runs in flight now: driven here, or being accepted. */
  inFlight: number
  /** Drives ended on this instance since it started (a count that only grows). */
  ended: number
  /** Whether the instance was under pressure in the window: its event loop or its database running late. */
  pressure: boolean
  /** How long the window lasted, as measured (a loaded instance's timer fires late). */
  windowMs: number
}

const smoothing = 0.3
const floor = 4
const growth = 1.1

/**
 * The cap on runs in flight that an instance sets itself (docs/guides/scaling.md#overload). Under
 * pressure it is what the instance completes in `seconds` (Little's law: runs in flight = rate ×
 * time in flight), so an accepted run is not left queueing behind more work than the instance gets
 * through in that time; without pressure it grows back while it binds. Long runs that cost the
 * instance little (a slow model, a person answering) put it under no pressure, so they never lower it.
 */
export class AdmissionLimit {
  readonly #ceiling: number
  readonly #seconds: number
  #limit: number
  #rate: number | undefined
  #lastEnded: number | undefined

  /** `ceiling`: the operator's cap (0: none); `seconds`: the time in flight to keep to under pressure. */
  constructor(ceiling: number, seconds: number) {
    this.#ceiling = ceiling > 0 ? ceiling : Number.POSITIVE_INFINITY
    this.#seconds = seconds
    this.#limit = this.#ceiling
  }

  /** Runs in flight past which new ones are refused now (infinite: no cap). */
  get limit(): number {
    return this.#limit
  }

  /** Runs the instance completes per second, smoothed over the last few windows. */
  get rate(): number {
    return this.#rate ?? 0
  }

  update(sample: AdmissionSample): void {
    const previous = this.#lastEnded
    this.#lastEnded = sample.ended
    if (previous === undefined) return // no rate yet: the first window only sets the count to start from
    const perSecond = (sample.ended - previous) / (sample.windowMs / 1000)
    this.#rate = this.#rate === undefined ? perSecond : smoothing * perSecond + (1 - smoothing) * this.#rate
    if (sample.pressure) {
      const sustainable = Math.max(floor, Math.ceil(this.#rate * this.#seconds))
      this.#limit = Math.min(this.#limit, sustainable)
    } else if (sample.inFlight >= this.#limit * 0.9) {
      this.#limit = Math.min(this.#ceiling, Math.ceil(this.#limit * growth) + 1)
    }
  }
}
