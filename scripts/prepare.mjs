// `prepare`: npm runs it on `npm pack`, when Plinth is installed from git or a path, and on `npm ci` /
// `npm install` here. Plugin authors' installs need dist/ (package.json exports point into it), so it
// builds when dist/ is stale. `npm ci` in this checkout transpiles (about a second) and builds the
// migrated PGlite template (a few seconds), so that the `npm start` after it is ready in about three
// seconds instead of running PGlite's initdb; the typed build (tsc) waits for `npm test` or `npm run build`.
import { spawnSync } from 'node:child_process'
import { realpathSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const root = realpathSync(fileURLToPath(new URL('..', import.meta.url)))
const initCwd = process.env.INIT_CWD ? realpathSync(process.env.INIT_CWD) : undefined
if (process.env.npm_command === 'ci' && initCwd === root) {
  const result = spawnSync(
    process.execPath,
    [fileURLToPath(new URL('build-if-stale.mjs', import.meta.url)), '--template'],
    {
      stdio: 'inherit',
    },
  )
  // Not fatal: without dist/ or the template `npm start` builds and migrates on its own, only slower.
  if (result.status !== 0) console.error('plinth: prepare: could not prepare dist/ now; `npm start` will build it')
  process.exit(0)
}
// With declarations: the package's exports name its .d.ts files.
const result = spawnSync(
  process.execPath,
  [fileURLToPath(new URL('build-if-stale.mjs', import.meta.url)), '--declarations'],
  {
    stdio: 'inherit',
  },
)
process.exit(result.status ?? 1)
