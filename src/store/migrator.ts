import { createHash } from 'node:crypto'
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { PostgresPool } from 'kysely'
import { StoreError } from './store-errors.js'

export interface Migration {
  name: string
  sql: string
  checksum: string
}

export interface MigrationResult {
  applied: string[]
  alreadyApplied: number
}

/** Reads `NNNN_name.sql` files in name order. */
export async function readMigrations(dir: string = resolveMigrationsDir()): Promise<Migration[]> {
  const names = (await readdir(dir)).filter((name) => /^\d{4}_[\w-]+\.sql$/.test(name)).sort()
  return Promise.all(
    names.map(async (name) => {
      const sql = await readFile(join(dir, name), 'utf8')
      return { name, sql, checksum: createHash('sha256').update(sql).digest('hex') }
    }),
  )
}

/**
 * Applies pending migrations, each in its own transaction together with its record, under an
 * advisory lock so two instances starting at once do not race. Refuses to continue when an applied
 * migration's file changed: forward-only means a new file, never an edit.
 */
export async function migrate(pool: PostgresPool, migrations: Migration[]): Promise<MigrationResult> {
  const client = await pool.connect()
  try {
    await client.query('select pg_advisory_lock(748201)', [])
    try {
      await client.query(
        'create table if not exists plinth_migrations (name text primary key, checksum text not null, applied_at timestamptz not null default now())',
        [],
      )
      const { rows } = await client.query<{ name: string; checksum: string }>(
        'select name, checksum from plinth_migrations where $1::int = 1 order by name',
        [1],
      )
      const applied = new Map(rows.map((row) => [row.name, row.checksum]))
      checkChecksums(migrations, applied)
      const done: string[] = []
      for (const migration of migrations) {
        if (applied.has(migration.name)) continue
        try {
          await client.query('begin', [])
          await client.query(migration.sql, [])
          await client.query('insert into plinth_migrations (name, checksum) values ($1, $2)', [
            migration.name,
            migration.checksum,
          ])
          await client.query('commit', [])
        } catch (error) {
          await client.query('rollback', []).catch(() => undefined)
          throw new StoreError('migration_failed', `migration ${migration.name} failed: ${(error as Error).message}`, {
            cause: error,
          })
        }
        done.push(migration.name)
      }
      return { applied: done, alreadyApplied: applied.size }
    } finally {
      await client.query('select pg_advisory_unlock(748201)', [])
    }
  } finally {
    client.release()
  }
}

function checkChecksums(migrations: Migration[], applied: Map<string, string>): void {
  // Applied by a newer release: this one would run on a schema it does not know, and write data that
  // release no longer expects (an older release did: user creation failing, files deleted).
  const known = new Set(migrations.map((migration) => migration.name))
  const unknown = [...applied.keys()].filter((name) => !known.has(name))
  if (unknown.length > 0)
    throw new StoreError(
      'migration_unknown',
      `the database has migrations this version of Plinth does not know (${unknown.join(', ')}): a newer version upgraded it. Run that version or a newer one, or restore the backup taken before the upgrade; an older version must not run on it`,
    )
  for (const migration of migrations) {
    const checksum = applied.get(migration.name)
    if (checksum !== undefined && checksum !== migration.checksum) {
      throw new StoreError(
        'migration_checksum_mismatch',
        `migration ${migration.name} was changed after it was applied (recorded sha256 ${checksum.slice(0, 12)}…, file has ${migration.checksum.slice(0, 12)}…); migrations are forward-only: restore the file and add a new migration instead`,
      )
    }
  }
}

function resolveMigrationsDir(): string {
  // src/store/migrator.ts and dist/src/store/migrator.js both sit below the package root.
  const here = fileURLToPath(new URL('.', import.meta.url))
  const root = here.includes('/dist/') ? join(here, '../../..') : join(here, '../..')
  return join(root, 'migrations')
}
