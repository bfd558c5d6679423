import { describe, expect, it } from 'vitest'
import { testEngines } from '../helpers/engines.js'
import { privatePostgresUnavailable } from '../helpers/private-postgres.js'
import { runCluster } from './cluster.js'
import { recordFigures, reliabilityMode } from './figures.js'

// Several instances on one Postgres, under load and failures (docs/guides/reliability.md, R6). Full: 300
// drivers, 200 subscribers; RELIABILITY_SHORT=1: 100 and 60; inside npm test: 24 and 12. The short and full
// sizes also measure throughput with 1, 2 and 3 instances (no failures).
const size = {
  test: { drivers: 24, subscribers: 12, runsPerDriver: 2 },
  short: { drivers: 100, subscribers: 60, runsPerDriver: 3 },
  full: { drivers: 300, subscribers: 200, runsPerDriver: 3 },
}[reliabilityMode]
const unavailable = testEngines().includes('postgres') ? privatePostgresUnavailable() : 'no Postgres configured'
if (unavailable && process.env.REQUIRE_PG === '1')
  throw new Error(`REQUIRE_PG=1 but the cluster harness cannot start a Postgres of its own: ${unavailable}`)
if (unavailable) console.warn(`[plinth tests] skipping the cluster harness: ${unavailable}`)

describe.skipIf(!!unavailable)('three instances under load, with failures', () => {
  it(
    `${size.drivers} drivers × runs of 3 rounds, ${size.subscribers} subscribers; kill -9, restart, Postgres restart, 5 s stall`,
    { timeout: 900_000 },
    async () => {
      const report = await runCluster({ instances: 3, chaos: true, ...size, log: (line) => console.log(line) })
      console.log(
        `[reliability] cluster: ${report.runs} runs ${JSON.stringify(report.outcomes)} in ${Math.round(report.wallMs)} ms (${report.throughput.toFixed(1)} runs/s); ` +
          `retried ${JSON.stringify(report.retried)}; subscribers saw ${report.subscriberEvents} events over ${report.subscriberReconnects} connections`,
      )
      if (report.serverErrors.length > 0)
        console.log(`[reliability] cluster: server errors:\n${report.serverErrors.join('\n')}`)
      const rows = [
        {
          check: `R6 three instances, ${size.drivers} drivers, ${size.subscribers} subscribers, with failures`,
          figure: `${report.runs} runs: ${JSON.stringify(report.outcomes)}; ${report.failures.length} problems`,
          goal: 'every run completed; nothing lost or twice',
          ok: report.failures.length === 0,
        },
      ]
      if (reliabilityMode !== 'test') {
        for (const instances of [1, 2, 3]) {
          const measured = await runCluster({ instances, chaos: false, ...size, subscribers: 0 })
          console.log(
            `[reliability] cluster throughput, ${instances} instance(s): ${measured.throughput.toFixed(1)} runs/s`,
          )
          rows.push({
            check: `R6 throughput, ${instances} instance(s), ${size.drivers} drivers × ${size.runsPerDriver} runs`,
            figure: `${measured.throughput.toFixed(1)} runs/s (${measured.failures.length} problems)`,
            goal: 'scales with cores',
            ok: measured.failures.length === 0,
          })
        }
      }
      recordFigures('cluster', rows, { timeline: report.timeline, retried: report.retried })
      expect(report.failures).toEqual([])
    },
  )
})
