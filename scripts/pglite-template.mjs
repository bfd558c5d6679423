// After a build: a migrated embedded database, dumped to dist/pglite-template.tar.gz, so a first start
// on a new data directory loads it instead of running PGlite's initdb and every migration.
import { writeFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'

const { dumpMigratedPGlite, pgliteTemplatePath } = await import(
  new URL('../dist/src/store/index.js', import.meta.url).href
)
const dump = await dumpMigratedPGlite('gzip')
await writeFile(pgliteTemplatePath, Buffer.from(await dump.arrayBuffer()))
console.error(`plinth: wrote ${fileURLToPath(new URL(`file://${pgliteTemplatePath}`))}`)
