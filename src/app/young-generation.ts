import { setFlagsFromString } from 'node:v8'

// While the server starts, V8's young generation would grow from 2 MB to its 32 MB maximum on the churn of
// loading modules and migrating, and an idle server never gives that memory back (about a quarter of its
// RSS). Growth is held off until the server is up; under load it grows as usual
// (docs/reference/benchmarks.md#start-and-cli-latency). An operator's own young-generation flags win.

const defaultGrowthFactor = 2
let held = false

/** Keeps the young generation at its initial size (`plinth serve`, until it is up); false when the operator sized it. */
export function holdYoungGeneration(): boolean {
  const own = [...process.execArgv, process.env.NODE_OPTIONS ?? ''].some((flag) => /semi[-_]space/.test(flag))
  if (own) return false
  if (!held) setFlagsFromString('--semi-space-growth-factor=1')
  held = true
  return true
}

/** Lets it grow again, as V8 sees fit. */
export function releaseYoungGeneration(): void {
  if (!held) return
  setFlagsFromString(`--semi-space-growth-factor=${defaultGrowthFactor}`)
  held = false
}
