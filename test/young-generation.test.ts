import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

// `plinth serve` holds V8's young generation at its initial size while it starts, so an idle server does
// not keep the 32 MB it would grow to (docs/reference/benchmarks.md#start-and-cli-latency), and lets it
// grow again once up. Run in a child process: V8 flags are process-wide.

const moduleUrl = new URL('../src/app/young-generation.ts', import.meta.url).href
const repoRoot = fileURLToPath(new URL('..', import.meta.url))

type Sizes = { holding: boolean; before: number; held: number; released: number }

/** The young generation's size (MB) before, after allocation churn while held, and after churn once released. */
function youngGenerationSizes(nodeOptions?: string): Sizes {
  const script = `
    import { getHeapSpaceStatistics } from 'node:v8'
    const { holdYoungGeneration, releaseYoungGeneration } = await import(${JSON.stringify(moduleUrl)})
    const size = () => getHeapSpaceStatistics().find((space) => space.space_name === 'new_space').space_size / 1e6
    const churn = () => { let keep = []; for (let i = 0; i < 2e6; i++) { keep.push({ i, s: 'x' + i }); if (keep.length > 100000) keep = [] } }
    const before = size(); const holding = holdYoungGeneration(); churn(); const held = size()
    releaseYoungGeneration(); churn(); const released = size()
    console.log(JSON.stringify({ holding, before, held, released }))
  `
  const result = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: repoRoot,
    encoding: 'utf8',
    env: { ...process.env, NODE_OPTIONS: nodeOptions ?? '' },
    timeout: 120_000,
  })
  expect(result.status, result.stderr).toBe(0)
  return JSON.parse(result.stdout.trim().split('\n').at(-1) ?? '') as Sizes
}

describe('the young generation while the server starts', () => {
  it('stays at its initial size while held and grows under churn once released', () => {
    const { holding, before, held, released } = youngGenerationSizes()
    expect(holding).toBe(true)
    expect(held).toBeLessThanOrEqual(before)
    expect(released).toBeGreaterThan(held * 2)
  })

  it("leaves an operator's own young-generation size alone", () => {
    const { holding, held } = youngGenerationSizes('--max-semi-space-size=8')
    expect(holding).toBe(false)
    // Grown past the initial 1 MB semi-spaces it would have been held to.
    expect(held).toBeGreaterThan(4.5)
  })
})
