// `npm start` runs this first: compiles to dist/ only when a source is newer than the last build,
// so a start after the first one does not recompile (and prints nothing). For running, the sources are
// transpiled with esbuild (seconds; `npm test` checks the types). `--declarations` (the `prepare` of an
// install from git or a path, and `npm pack`) compiles with tsc instead, for the .d.ts files the
// package's exports name — and rebuilds a transpiled dist/ that lacks them.
//
// The migrated PGlite template (dist/pglite-template.tar.gz) lets a new data directory skip PGlite's
// initdb (≈ 4.5 s) on its first start. `--declarations` and `--template` (the `prepare` of `npm ci` in
// this checkout) build it; a rebuild keeps it while the migrations and PGlite are the same
// (dist/pglite-template.key), so a source change does not cost the next first start those seconds.
import { spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
const stamp = join(root, 'dist', '.build-stamp')
const templateFile = join(root, 'dist', 'pglite-template.tar.gz')
const templateKeyFile = join(root, 'dist', 'pglite-template.key')

function newest(path) {
  const info = statSync(path, { throwIfNoEntry: false })
  if (!info) return 0
  if (!info.isDirectory()) return info.mtimeMs
  let latest = info.mtimeMs
  for (const name of readdirSync(path)) if (name !== 'node_modules') latest = Math.max(latest, newest(join(path, name)))
  return latest
}

/** What the template is made of: the migrations, the code that applies them, and PGlite's version. */
function templateKey() {
  const hash = createHash('sha256')
  const pglite = JSON.parse(readFileSync(join(root, 'node_modules', '@electric-sql', 'pglite', 'package.json'), 'utf8'))
  hash.update(`pglite ${pglite.version}\n`)
  const files = [
    ...readdirSync(join(root, 'migrations'))
      .sort()
      .map((name) => join('migrations', name)),
    join('src', 'store', 'migrator.ts'),
  ]
  for (const file of files) hash.update(`${file}\n`).update(readFileSync(join(root, file)))
  return hash.digest('hex')
}

/** The current template's bytes when it still matches the sources, to survive a rebuild. */
function keptTemplate(key) {
  if (!existsSync(templateFile) || !existsSync(templateKeyFile)) return undefined
  if (readFileSync(templateKeyFile, 'utf8').trim() !== key) return undefined
  return readFileSync(templateFile)
}

const sources = Math.max(
  ...[
    'src',
    'plugins',
    'migrations',
    'openapi',
    'tsconfig.json',
    'tsconfig.build.json',
    'package.json',
    // A new version of a vendored library (scripts/vendor.mjs).
    'package-lock.json',
  ].map((name) => newest(join(root, name))),
)
const declarations = process.argv.includes('--declarations')
const wantTemplate = declarations || process.argv.includes('--template')
const built = statSync(stamp, { throwIfNoEntry: false })?.mtimeMs ?? 0
const withDeclarations = built > 0 && readFileSync(stamp, 'utf8').includes('declarations')
const key = templateKey()
if (sources > built || (declarations && !withDeclarations)) {
  console.error('plinth: compiling to dist/ (sources changed since the last build)…')
  const template = keptTemplate(key)
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
  // typebox and kysely as one module each: a start loads ≈ 330 modules instead of ≈ 970.
  const { vendor } = await import('./vendor.mjs')
  await vendor()
  const types = spawnSync(process.execPath, [join(root, 'scripts', 'copy-openapi-types.mjs')], { stdio: 'inherit' })
  if (types.status !== 0) process.exit(types.status ?? 1)
  if (template) {
    writeFileSync(templateFile, template)
    writeFileSync(templateKeyFile, `${key}\n`)
  }
  writeFileSync(stamp, `${new Date().toISOString()}${declarations ? ' declarations' : ''}`)
}
if (wantTemplate && keptTemplate(key) === undefined) {
  const result = spawnSync(process.execPath, [join(root, 'scripts', 'pglite-template.mjs')], { stdio: 'inherit' })
  if (result.status !== 0) process.exit(result.status ?? 1)
  writeFileSync(templateKeyFile, `${key}\n`)
}
