import { readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { BaseSequencer, type TestSpecification } from 'vitest/node'

/** A file neither run here before nor recorded (a new one): first, as in Vitest's own order. */
const unknown = 1e9

/**
 * Starts the longest test files first, so that no long file begins near the end while the other
 * worker sits idle. Vitest's own order knows durations only from an earlier run on this machine; a
 * fresh checkout (CI) has none and starts the biggest files first, yet a 50-line file can run for
 * minutes. Durations from an earlier run here win; those recorded in test/file-durations.json (seconds
 * per file in a full run; `node scripts/test-durations.mjs` refreshes them after one, now and then, since
 * only the order depends on them) stand in.
 */
export class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const root = this.ctx.config.root
    const recorded = JSON.parse(readFileSync(join(root, 'test', 'file-durations.json'), 'utf8')) as Record<
      string,
      number
    >
    const seconds = (spec: TestSpecification): number => {
      const path = relative(root, spec.moduleId)
      const cached = this.ctx.cache.getFileTestResults(`${spec.project.name}:${path}`)
      return cached ? cached.duration / 1000 : (recorded[path] ?? unknown)
    }
    return [...files].sort((a, b) => seconds(b) - seconds(a))
  }
}
