import { describe, expect, it } from 'vitest'
import { testEngines } from '../helpers/engines.js'
import { recordFigures, reliabilityMode } from './figures.js'
import { runLoadSoak } from './load-soak.js'

// Load and soak (docs/guides/reliability.md, R5): load (concurrent runs × 3 rounds with SSE subscribers) then
// a soak of mixed traffic. Full: 200 runs, 100 subscribers, 30 minutes; RELIABILITY_SHORT=1: the same
// load, 2 minutes; inside npm test: 20 runs, 10 subscribers, 15 s. On Postgres when configured, else
// PGlite.
const size = {
  test: { concurrentRuns: 20, subscribers: 10, soakMs: 15_000, sampleEveryMs: 2_000 },
  short: { concurrentRuns: 200, subscribers: 100, soakMs: 120_000, sampleEveryMs: 10_000 },
  full: { concurrentRuns: 200, subscribers: 100, soakMs: 30 * 60_000, sampleEveryMs: 10_000 },
}[reliabilityMode]
// RELIABILITY_SOAK_MINUTES overrides the soak's length (e.g. a longer one to tell slow growth from a leak).
if (process.env.RELIABILITY_SOAK_MINUTES) size.soakMs = Number(process.env.RELIABILITY_SOAK_MINUTES) * 60_000
const engine = testEngines().includes('postgres') ? 'postgres' : 'pglite'

describe('load and soak', () => {
  it(
    `${engine}: ${size.concurrentRuns} concurrent runs × 3 rounds with ${size.subscribers} subscribers, then ${size.soakMs / 1000} s of mixed traffic`,
    { timeout: size.soakMs + 600_000 },
    async () => {
      const report = await runLoadSoak({ engine, roundsPerRun: 3, ...size, log: (line) => console.log(line) })
      const { load, soak } = report
      console.log(
        `[reliability] load (${engine}): ${load.rounds} rounds, ${load.errors} errors, ${load.shed} refused as overload, round p50 ${load.round.p50.toFixed(1)} ms p99 ${load.round.p99.toFixed(1)} ms, wall ${Math.round(load.wallMs)} ms; ` +
          `soak ${Math.round(soak.durationMs / 1000)} s: ${JSON.stringify(soak.operations)}, ${soak.errors.length} errors, RSS ${soak.rssBaselineMb.toFixed(0)} (baseline) / ${soak.rssStartMb.toFixed(0)} (soak start) → ${soak.rssEndMb.toFixed(0)} MB (slope ${soak.rssSlopeMbPerMin.toFixed(2)} MB/min), fds ${soak.fdsBaseline} (baseline, ${soak.socketsBaseline} sockets) / ${soak.fdsStart} → ${soak.fdsEnd} (${soak.socketsEnd} sockets)`,
      )
      // Against the baseline taken before any load (the client's idle connections closed). Files, pipes and
      // the like must be back (± 2); sockets may include up to the database pool's size (10) more.
      const filesBaseline = soak.fdsBaseline - soak.socketsBaseline
      const filesEnd = soak.fdsEnd - soak.socketsEnd
      const fdsOk = filesEnd <= filesBaseline + 2 && soak.socketsEnd <= soak.socketsBaseline + 10
      recordFigures(
        'load-soak',
        [
          {
            check: `R5 load (${engine}): ${load.runs} runs × 3 rounds, ${load.subscribers} subscribers`,
            figure: `${load.errors} errors, ${load.shed} refused as overload; round p50 ${load.round.p50.toFixed(1)} ms, p99 ${load.round.p99.toFixed(1)} ms`,
            goal: '0 errors',
            ok: load.errors === 0,
          },
          {
            check: `R5 soak (${engine}): ${Math.round(soak.durationMs / 1000)} s of mixed traffic`,
            figure: `${Object.values(soak.operations).reduce((a, b) => a + b, 0)} operations, ${soak.errors.length} errors`,
            goal: '0 errors',
            ok: soak.errors.length === 0,
          },
          {
            check: 'R5 soak: RSS slope after warm-up',
            figure: `${soak.rssSlopeMbPerMin.toFixed(2)} MB/min (baseline ${soak.rssBaselineMb.toFixed(0)}, soak ${soak.rssStartMb.toFixed(0)} → ${soak.rssEndMb.toFixed(0)} MB)`,
            goal: 'flat',
            ok: Math.abs(soak.rssSlopeMbPerMin) < 2 || reliabilityMode === 'test',
          },
          {
            check: 'R5 soak: file descriptors baseline → end',
            figure: `files ${filesBaseline} → ${filesEnd}, sockets ${soak.socketsBaseline} → ${soak.socketsEnd} (${soak.fdsStart} in all when the soak started, after the load)`,
            goal: 'files back (± 2); sockets within the pool size',
            ok: fdsOk,
          },
        ],
        { samples: soak.samples },
      )
      expect(load.errors).toBe(0)
      expect(soak.errors).toEqual([])
      expect(filesEnd).toBeLessThanOrEqual(filesBaseline + 2)
      expect(soak.socketsEnd).toBeLessThanOrEqual(soak.socketsBaseline + 10)
    },
  )
})
