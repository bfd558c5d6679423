import { readFile, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, inject, it } from 'vitest'
import { dbTypesFile, generateDbTypes } from '../scripts/db-types.js'
import './helpers/provided-context.js'

// The store's table types are generated from the migrations: a migration added without regenerating
// them leaves the store typed against a schema that no longer exists.
describe('generated table types', () => {
  it('src/store/db-types.generated.ts is what the migrated schema generates', async () => {
    // The migrated dump every test file clones (the store's migrator made it from migrations/).
    const fresh = await generateDbTypes(new Blob([await readFile(inject('pgliteTemplatePath'))]))
    const committed = await readFile(dbTypesFile, 'utf8')
    if (fresh !== committed) {
      const freshFile = join(tmpdir(), `db-types.generated.${process.pid}.ts`)
      await writeFile(freshFile, fresh)
      expect.fail(
        `src/store/db-types.generated.ts is stale: run \`npm run db:types\` and commit it (the fresh one is at ${freshFile}; diff them to see what changed)`,
      )
    }
  }, 120_000)
})
