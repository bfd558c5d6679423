import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { SurfaceVersion } from '../src/extension/index.js'
import { generateSurface, surfaceFile } from '../scripts/surface.js'

const RULES = [
  'The plugin surface (src/extension) changed but surface.txt was not regenerated.',
  'Run `npm run surface` and commit surface.txt. Bump SurfaceVersion in src/extension/index.ts first:',
  '  - something added (a new export, a new optional member) → minor (1.0.0 → 1.1.0)',
  '  - something changed or removed (a type, a signature, a required member) → major (1.x → 2.0.0), and',
  '    bundled plugins must then declare the new range in `surface`.',
]

/** The first lines where the two texts differ, to show in the failure. */
function firstDifferences(expected: string, actual: string, limit = 8): string {
  const want = expected.split('\n')
  const have = actual.split('\n')
  const out: string[] = []
  for (let line = 0; line < Math.max(want.length, have.length) && out.length < limit; line++) {
    if (want[line] !== have[line])
      out.push(
        `  line ${line + 1}: surface.txt has ${JSON.stringify(have[line] ?? '<end>')}, the surface gives ${JSON.stringify(want[line] ?? '<end>')}`,
      )
  }
  return out.join('\n')
}

describe('extension surface', () => {
  // Building the TypeScript program takes a second or two: do it once.
  let cached: string | undefined
  const generated = (): string => (cached ??= generateSurface())

  it('is the version the plugin guide names', () => {
    const guide = readFileSync(new URL('../docs/guides/writing-a-plugin.md', import.meta.url), 'utf8')
    expect(/versioned by `SurfaceVersion` \(([0-9.]+);/.exec(guide)?.[1]).toBe(SurfaceVersion)
  })

  it('matches the committed surface.txt', () => {
    let committed: string
    try {
      committed = readFileSync(surfaceFile, 'utf8').replace(/\r\n/g, '\n')
    } catch {
      expect.fail(`surface.txt is missing. ${RULES.join('\n')}`)
    }
    if (committed !== generated())
      expect.fail(`${RULES.join('\n')}\nFirst differences:\n${firstDifferences(generated(), committed)}`)
  })

  it('records the exported SurfaceVersion, a plain x.y.z that ^1.0.0-style ranges match', () => {
    expect(SurfaceVersion).toMatch(/^\d+\.\d+\.\d+$/)
    expect(generated().split('\n')[1]).toBe(`SurfaceVersion = ${SurfaceVersion}`)
  })
})
