import { describe, expect, it } from 'vitest'
import { AdmissionLimit } from '../src/server/admission-limit.js'
import { OverloadGuard } from '../src/server/overload.js'
import { waitFor } from './helpers/waits.js'

// The cap on runs in flight an instance sets itself (docs/guides/scaling.md#overload): under pressure,
// what it completes in a few seconds; long runs that cost it nothing never lower it.
describe('adaptive admission limit', () => {
  const windowMs = 1000
  /** Feeds `windows` one-second windows completing `rate` runs per second. */
  const feed = (
    limit: AdmissionLimit,
    from: { ended: number },
    windows: number,
    rate: number,
    inFlight: number,
    pressure: boolean,
  ): void => {
    for (let index = 0; index < windows; index++) {
      from.ended += rate
      limit.update({ inFlight, ended: from.ended, pressure, windowMs })
    }
  }

  it('under pressure, caps runs in flight at the seconds asked of what the instance completes', () => {
    const limit = new AdmissionLimit(256, 2)
    const count = { ended: 0 }
    limit.update({ inFlight: 0, ended: 0, pressure: false, windowMs })
    feed(limit, count, 10, 20, 50, false)
    expect(limit.limit).toBe(256) // 50 in flight: far from binding, nothing to adapt to
    feed(limit, count, 1, 20, 120, true)
    expect(limit.limit).toBe(40) // 20 runs/s × 2 s
    expect(limit.rate).toBeCloseTo(20)
  })

  it('never lowers the cap for long runs that put the instance under no pressure (a slow model)', () => {
    const limit = new AdmissionLimit(256, 2)
    const count = { ended: 0 }
    limit.update({ inFlight: 0, ended: 0, pressure: false, windowMs })
    // 200 runs of a minute each: 3 a second end, and the loop and the database stay on time.
    feed(limit, count, 120, 3, 200, false)
    expect(limit.limit).toBe(256)
    // Without an operator's cap there is none at all.
    const uncapped = new AdmissionLimit(0, 2)
    uncapped.update({ inFlight: 0, ended: 0, pressure: false, windowMs })
    feed(uncapped, { ended: 0 }, 120, 3, 5000, false)
    expect(uncapped.limit).toBe(Number.POSITIVE_INFINITY)
  })

  it('grows back while it binds once the pressure has passed, up to the operator cap', () => {
    const limit = new AdmissionLimit(100, 2)
    const count = { ended: 0 }
    limit.update({ inFlight: 0, ended: 0, pressure: false, windowMs })
    feed(limit, count, 1, 5, 80, true)
    expect(limit.limit).toBe(10)
    const seen: number[] = []
    for (let window = 0; window < 40; window++) {
      feed(limit, count, 1, 5, limit.limit, false)
      seen.push(limit.limit)
    }
    expect(seen[0]).toBeGreaterThan(10)
    expect(seen.every((value, index) => index === 0 || value >= seen[index - 1]!)).toBe(true)
    expect(limit.limit).toBe(100)
    // Not binding (few runs in flight): it stays where it is.
    feed(limit, count, 1, 5, 80, true)
    const low = limit.limit
    feed(limit, count, 5, 5, 1, false)
    expect(limit.limit).toBe(low)
  })

  it('the guard refuses runs past the cap it set while its database ran late, and takes them again after', async () => {
    // Late, but not so late that the database wait alone refuses runs: pressure is a quarter of the limit.
    const guard = new OverloadGuard({
      maxEventLoopDelayMs: 0,
      maxDatabaseWaitMs: 8000,
      maxAdmitMs: 0,
      maxActiveRuns: 256,
      adaptiveCapSeconds: 2,
      retryAfterSeconds: 1,
    })
    let late = true
    const started = Date.now()
    guard.start(
      () => new Promise<void>((resolve) => setTimeout(resolve, late ? 2500 : 0)),
      // 30 runs driven, 5 ending a second.
      () => ({ driven: 30, ended: Math.floor(((Date.now() - started) / 1000) * 5) }),
    )
    try {
      const reason = await waitFor(() => guard.overloadReason ?? null, {
        timeoutMs: 30_000,
        intervalMs: 50,
        what: 'the instance to cap its runs while late',
      })
      expect(reason).toMatch(/^30 runs in flight; it takes \d+ while late, 2 s of the [\d.]+ runs\/s it completes$/)
      expect(guard.activeRunLimit).toBeLessThan(30)
      late = false
      await waitFor(() => (guard.overloaded ? null : true), {
        timeoutMs: 60_000,
        intervalMs: 100,
        what: 'the cap to grow back past 30 once the database is on time',
      })
      expect(guard.activeRunLimit).toBeGreaterThan(30)
    } finally {
      guard.stop()
    }
  }, 120_000)
})
