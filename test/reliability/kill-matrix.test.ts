import { describe, expect, it } from 'vitest'
import { testEngines } from '../helpers/engines.js'
import { recordFigures, reliabilityMode } from './figures.js'
import { runKillMatrix, type KillMatrixReport } from './kill-matrix.js'

// The kill -9 matrix (docs/guides/reliability.md, R1): SIGKILL at every distinct point of a 3-round run (a
// tool, a decision, a client tool, a streamed answer) and at seeded random offsets, on PGlite and
// Postgres; restart; check recovery. Two kills inside the tools always; inside npm test 2 stream points
// and 1 random offset per engine; RELIABILITY_SHORT=1 12 and 2; the full run every point and 10 random
// offsets.
const seed = Number(process.env.RELIABILITY_SEED ?? 20261201)
const size = {
  test: { points: 2, randomOffsets: 1 },
  short: { points: 12, randomOffsets: 2 },
  full: { points: 'all' as const, randomOffsets: 10 },
}[reliabilityMode]
const engines = testEngines()
if (!engines.includes('postgres'))
  console.warn('[plinth tests] the kill matrix runs on PGlite only: Postgres is not configured (TEST_DATABASE_URL)')

describe('kill matrix: SIGKILL at every point of a run, then recovery', () => {
  const reports: KillMatrixReport[] = []
  for (const engine of engines) {
    it(
      `${engine}: ${size.points === 'all' ? 'every distinct point' : `${size.points} points`} + ${size.randomOffsets} random offsets (seed ${seed})`,
      { timeout: 900_000 },
      async () => {
        const report = await runKillMatrix({
          engine,
          points: size.points,
          randomOffsets: size.randomOffsets,
          seed,
          log: (line) => console.log(line),
        })
        reports.push(report)
        console.log(
          `[reliability] kill matrix ${engine}: ${report.tried} kills over ${report.distinctPoints} distinct points, outcomes ${JSON.stringify(report.outcomes)}, failures ${report.failures.length}, ${Math.round(report.durationMs / 1000)} s`,
        )
        recordFigures(
          'kill-matrix',
          reports.map((entry) => ({
            check: `R1 kill -9 matrix (${entry.engine})`,
            figure: `${entry.tried} kills (${entry.distinctPoints} distinct points), ${entry.failures.length} failures`,
            goal: '0 failures',
            ok: entry.failures.length === 0,
          })),
        )
        expect(report.failures).toEqual([])
        expect(report.tried).toBeGreaterThan(0)
      },
    )
  }
})
