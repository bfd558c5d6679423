import { defineConfig } from 'vitest/config'
import { LongestFirstSequencer } from './test/longest-first.js'

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts', 'plugins/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // One process per worker for all its files: the sources and PGlite's WebAssembly are loaded once,
    // not once per file (a quarter of the suite's CPU). Files restore what they change
    // (docs/guides/development.md#tests).
    isolate: false,
    // The reliability checks measure heap after a full collection.
    execArgv: ['--expose-gc'],
    // 2-core machines: more workers than cores only adds PGlite start-up contention.
    maxWorkers: 2,
    reporters: ['default'],
    // The longest files first (test/file-durations.json): a long one started last would leave a worker idle.
    sequence: { sequencer: LongestFirstSequencer },
  },
})
