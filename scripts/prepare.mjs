// `prepare`: npm runs it on `npm pack`, when Plinth is installed from git or a path, and on `npm ci` /
// `npm install` here. Plugin authors' installs need dist/ (package.json exports point into it), so it
// builds when dist/ is stale. `npm ci` in this checkout skips it: development and tests run from
// source, and the build takes a minute (`npm run build` or `npm start` builds when wanted).
import { spawnSync } from 'node:child_process'
import { realpathSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const root = realpathSync(fileURLToPath(new URL('..', import.meta.url)))
const initCwd = process.env.INIT_CWD ? realpathSync(process.env.INIT_CWD) : undefined
if (process.env.npm_command === 'ci' && initCwd === root) {
  console.error('plinth: prepare: no build on `npm ci` in the checkout (`npm run build` builds dist/)')
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
