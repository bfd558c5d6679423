import { readFileSync } from 'node:fs'
import semver from 'semver'
import { describe, expect, it } from 'vitest'

// package.json's `engines` must be true for every installed dependency: `npm ci` on the oldest
// supported Node must not warn EBADENGINE (CI also installs with --engine-strict).
const root = new URL('../', import.meta.url)
const manifest = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as { engines: { node: string } }
const lock = JSON.parse(readFileSync(new URL('package-lock.json', root), 'utf8')) as {
  packages: Record<string, { engines?: { node?: string } | string[] }>
}

describe('supported Node versions', () => {
  it('every locked dependency runs on the oldest Node that package.json accepts', () => {
    const oldest = semver.minVersion(manifest.engines.node)?.version
    expect(oldest).toMatch(/^20\./)
    const refusing = Object.entries(lock.packages)
      .filter(
        ([path, entry]) =>
          path !== '' &&
          !Array.isArray(entry.engines) &&
          entry.engines?.node &&
          !semver.satisfies(oldest!, entry.engines.node),
      )
      .map(([path, entry]) => `${path} needs node ${(entry.engines as { node: string }).node}`)
    expect(refusing).toEqual([])
  })
})
