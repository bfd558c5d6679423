// Refreshes test/file-durations.json (the order test/longest-first.ts starts files in) from the
// durations Vitest recorded in its cache during the last full run here (`npx vitest run`).
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
const cacheDir = join(root, 'node_modules', '.vite', 'vitest')
const caches = readdirSync(cacheDir, { withFileTypes: true }).filter((entry) => entry.isDirectory())
if (caches.length !== 1) throw new Error(`expected one Vitest cache in ${cacheDir}, found ${caches.length}`)
/** @type {{ results: Array<[string, { duration: number }]> }} */
const cache = JSON.parse(readFileSync(join(cacheDir, caches[0].name, 'results.json'), 'utf8'))
const seconds = Object.fromEntries(
  cache.results
    .map(([key, { duration }]) => [key.slice(key.indexOf(':') + 1), Math.round(duration / 1000)])
    .sort((a, b) => b[1] - a[1]),
)
writeFileSync(join(root, 'test', 'file-durations.json'), `${JSON.stringify(seconds, null, 2)}\n`)
console.error(`test/file-durations.json: ${Object.keys(seconds).length} files`)
