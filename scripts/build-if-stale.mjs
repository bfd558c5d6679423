// `npm start` runs this first: compiles to dist/ only when a source is newer than the last build,
// so a start after the first one does not recompile (and prints nothing). For running, the sources are
// transpiled with esbuild (seconds; `npm test` checks the types). `--declarations` (the `prepare` of an
// install from git or a path, and `npm pack`) compiles with tsc instead, for the .d.ts files the
// package's exports name — and rebuilds a transpiled dist/ that lacks them.
import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
const stamp = join(root, 'dist', '.build-stamp')

function newest(path) {
  const info = statSync(path, { throwIfNoEntry: false })
  if (!info) return 0
  if (!info.isDirectory()) return info.mtimeMs
  let latest = info.mtimeMs
  for (const name of readdirSync(path)) if (name !== 'node_modules') latest = Math.max(latest, newest(join(path, name)))
  return latest
}

const sources = Math.max(
  ...['src', 'plugins', 'migrations', 'openapi', 'tsconfig.json', 'tsconfig.build.json', 'package.json'].map((name) =>
    newest(join(root, name)),
  ),
)
const declarations = process.argv.includes('--declarations')
const built = statSync(stamp, { throwIfNoEntry: false })?.mtimeMs ?? 0
const withDeclarations = built > 0 && readFileSync(stamp, 'utf8').includes('declarations')
if (sources > built || (declarations && !withDeclarations)) {
  console.error('plinth: compiling to dist/ (sources changed since the last build)…')
  // From scratch: a file removed from the sources must not linger in dist/.
  rmSync(join(root, 'dist'), { recursive: true, force: true })
  if (declarations) {
    const result = spawnSync(
      process.execPath,
      [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'tsconfig.build.json')],
      { stdio: 'inherit' },
    )
    if (result.status !== 0) process.exit(result.status ?? 1)
  } else {
    // Transpiled, not type-checked (npm test checks types): a first start takes seconds, not half a minute.
    const { transpile } = await import('./transpile.mjs')
    await transpile()
  }
  const types = spawnSync(process.execPath, [join(root, 'scripts', 'copy-openapi-types.mjs')], { stdio: 'inherit' })
  if (types.status !== 0) process.exit(types.status ?? 1)
  // The migrated template a new data directory starts from (see src/store/open-store.ts), for the
  // package: building it (≈ 6 s) costs a first start more than migrating its one data directory (≈ 2 s).
  if (declarations) {
    const template = spawnSync(process.execPath, [join(root, 'scripts', 'pglite-template.mjs')], { stdio: 'inherit' })
    if (template.status !== 0) process.exit(template.status ?? 1)
  }
  writeFileSync(stamp, `${new Date().toISOString()}${declarations ? ' declarations' : ''}`)
}
