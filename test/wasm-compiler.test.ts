import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

// `plinth serve` on the embedded database keeps WebAssembly on V8's baseline compiler unless
// `pgliteCompiler` is "optimizing" (src/app/wasm-compiler.ts). Run in a child process: V8 flags are
// process-wide. Whether a hot function was recompiled optimized is read with V8's test natives.

const moduleUrl = new URL('../src/app/wasm-compiler.ts', import.meta.url).href
const repoRoot = fileURLToPath(new URL('..', import.meta.url))

/** Applies `choice`, runs a small WebAssembly function hot, and says whether V8 optimized it. */
function tiering(choice: string, ownFlags: string[] = []): { applied: boolean; optimized: boolean } {
  const script = `
    const { chooseWasmCompiler } = await import(${JSON.stringify(moduleUrl)})
    const applied = chooseWasmCompiler(${JSON.stringify(choice)})
    // (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add)
    const bytes = new Uint8Array([0,97,115,109,1,0,0,0,1,7,1,96,2,127,127,1,127,3,2,1,0,7,7,1,3,97,100,100,0,0,10,9,1,7,0,32,0,32,1,106,11])
    const add = (await WebAssembly.instantiate(bytes)).instance.exports.add
    const optimized = () => %IsTurboFanFunction(add)
    let sum = 0
    // Far more calls than V8's tier-up budget; tier-up compiles in the background, so yield between batches.
    for (let batch = 0; batch < 400 && !optimized(); batch++) {
      for (let i = 0; i < 100000; i++) sum = add(sum, i) | 0
      await new Promise((resolve) => setTimeout(resolve, 5))
    }
    console.log(JSON.stringify({ applied, optimized: optimized() }))
  `
  const result = spawnSync(
    process.execPath,
    ['--allow-natives-syntax', ...ownFlags, '--import', 'tsx', '--input-type=module', '-e', script],
    { cwd: repoRoot, encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' }, timeout: 120_000 },
  )
  expect(result.status, result.stderr).toBe(0)
  return JSON.parse(result.stdout.trim().split('\n').at(-1) ?? '') as { applied: boolean; optimized: boolean }
}

describe('the embedded database compiler', () => {
  it('baseline (the default): hot WebAssembly is not recompiled optimized', () => {
    expect(tiering('baseline')).toEqual({ applied: true, optimized: false })
  })

  it('optimizing: V8 recompiles hot WebAssembly as it always does', () => {
    expect(tiering('optimizing')).toEqual({ applied: false, optimized: true })
  })

  it("leaves an operator's own WebAssembly tiering flags alone", () => {
    expect(tiering('baseline', ['--wasm-tier-up'])).toEqual({ applied: false, optimized: true })
  })
})
