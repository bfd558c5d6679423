import { describe, expect, it } from 'vitest'
import { recordFigures, reliabilityMode } from './figures.js'
import { runOverload } from './overload.js'

// Overload (docs/guides/reliability.md, R5): three times the measured capacity, on the embedded database
// (where one thread does the server's and the database's work). Full: 64 clients measured for 30 s, then
// 120 s of arrivals; RELIABILITY_SHORT=1: 15 s and 30 s; inside npm test: 8 clients, 4 s and 6 s.
const size = {
  test: { concurrency: 8, measureMs: 4_000, overloadMs: 6_000 },
  short: { concurrency: 64, measureMs: 15_000, overloadMs: 30_000 },
  full: { concurrency: 64, measureMs: 30_000, overloadMs: 120_000 },
}[reliabilityMode]

describe('overload', () => {
  it(
    `pglite: runs arriving at 3× the capacity measured with ${size.concurrency} clients, for ${size.overloadMs / 1000} s`,
    { timeout: size.measureMs + size.overloadMs + 600_000 },
    async () => {
      const report = await runOverload({ engine: 'pglite', ...size, log: (line) => console.log(line) })
      recordFigures('overload', [
        {
          check: `R5 overload (pglite): 3× the measured ${report.capacity.toFixed(1)} runs/s for ${size.overloadMs / 1000} s, the cap on runs in flight set by the instance (lowest ${report.lowestCap ?? 'none'})`,
          figure: `${report.offered} offered: ${report.accepted} accepted (p50 ${report.acceptedLatency.p50.toFixed(0)} ms, p99 ${report.acceptedLatency.p99.toFixed(0)} ms), ${report.refused} refused 503 overloaded; slowest answer ${report.slowestAnswerMs} ms; ${report.errors.length} errors`,
          goal: '0 errors among accepted runs; refusals at once, never a timeout',
          ok: report.errors.length === 0,
        },
      ])
      expect(report.errors).toEqual([])
      expect(report.accepted + report.refused).toBe(report.offered)
    },
  )
})
