import { execFile } from 'node:child_process'
import { appendFile, cp, mkdtemp, readFile, rm, stat, symlink } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

// `npm ci` builds dist/ and the migrated PGlite template so that the first `npm start` skips PGlite's
// initdb (docs/guides/development.md); a rebuild after a source change keeps the
// template while the migrations are the same. Run on a copy of the checkout: rebuilding the real dist/
// would pull it from under the suites that spawn it.
const run = promisify(execFile)
const repo = fileURLToPath(new URL('..', import.meta.url))

describe('build-if-stale and the PGlite template', () => {
  let root: string
  const build = async (...args: string[]): Promise<string> =>
    (await run(process.execPath, [join(root, 'scripts', 'build-if-stale.mjs'), ...args], { cwd: root })).stderr
  const template = (): string => join(root, 'dist', 'pglite-template.tar.gz')
  const exists = async (path: string): Promise<boolean> => (await stat(path).catch(() => undefined)) !== undefined

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'plinth-build-'))
    for (const name of ['src', 'plugins', 'migrations', 'openapi', 'scripts'])
      await cp(join(repo, name), join(root, name), { recursive: true })
    for (const name of ['package.json', 'tsconfig.json', 'tsconfig.build.json'])
      await cp(join(repo, name), join(root, name))
    await symlink(join(repo, 'node_modules'), join(root, 'node_modules'))
  })
  afterAll(async () => {
    if (root) await rm(root, { recursive: true, force: true })
  })

  it('builds the template with --template, keeps it across a rebuild, and drops it when a migration changes', async () => {
    await build('--template')
    expect(await exists(join(root, 'dist', 'src', 'app', 'main.js'))).toBe(true)
    const first = await readFile(template())
    expect(first.length).toBeGreaterThan(100_000)

    // A source changed: recompiled, and the template survives byte for byte.
    await appendFile(join(root, 'src', 'app', 'main.ts'), '\n')
    expect(await build()).toMatch(/compiling to dist/)
    expect(Buffer.compare(await readFile(template()), first)).toBe(0)

    // Nothing changed: no rebuild, and --template finds the template current.
    expect(await build('--template')).toBe('')

    // A migration changed: the template no longer matches; a plain rebuild drops it, --template remakes it.
    await appendFile(join(root, 'migrations', '0001_foundation.sql'), '\n-- changed\n')
    await build()
    expect(await exists(template())).toBe(false)
    await build('--template')
    expect(await exists(template())).toBe(true)
  }, 180_000)
})
