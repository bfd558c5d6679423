import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

/** Where reliability runs leave their figures, for `scripts/reliability-report.mjs` to print as one table. */
export const figuresDir =
  process.env.RELIABILITY_FIGURES ?? fileURLToPath(new URL('../../test-artifacts/reliability/', import.meta.url))

/** Which size of each check runs: inside `npm test`, `RELIABILITY_SHORT=1` (bounded) or the full one. */
export const reliabilityMode: 'test' | 'short' | 'full' =
  process.env.RELIABILITY_SHORT === '1' ? 'short' : process.env.RELIABILITY_FULL === '1' ? 'full' : 'test'

export interface FigureRow {
  check: string
  figure: string
  goal: string
  ok: boolean
}

/** Records one check's figures (replacing that check's earlier file); `details` (e.g. samples) are kept beside them. */
export function recordFigures(name: string, rows: FigureRow[], details?: Record<string, unknown>): void {
  mkdirSync(figuresDir, { recursive: true })
  writeFileSync(
    join(figuresDir, `${name}.json`),
    JSON.stringify({ name, mode: reliabilityMode, at: new Date().toISOString(), rows, ...details }, null, 2),
  )
}
