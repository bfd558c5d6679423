import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts', 'plugins/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // The reliability checks measure heap after a full collection.
    execArgv: ['--expose-gc'],
    // 2-core machines: more workers than cores only adds PGlite start-up contention.
    maxWorkers: 2,
    reporters: ['default'],
  },
})
