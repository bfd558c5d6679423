import { migrate, readMigrations } from '../../src/store/index.js'

/** A PGlite database migrated up to (not including) the migration whose name starts with `prefix`. */
export async function migratedUpTo(prefix: string) {
  const { PGlite } = await import('@electric-sql/pglite')
  const { vector } = await import('@electric-sql/pglite/vector')
  const { PGlitePool } = await import('../../src/store/pglite/pglite-pool.js')
  const pglite = await PGlite.create({ extensions: { vector } })
  const pool = new PGlitePool(pglite)
  const migrations = await readMigrations()
  await migrate(
    pool,
    migrations.slice(
      0,
      migrations.findIndex((migration) => migration.name.startsWith(prefix)),
    ),
  )
  return { pglite, rest: () => migrate(pool, migrations), end: () => pool.end() }
}
