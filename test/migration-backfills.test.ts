import { describe, expect, it } from 'vitest'
import { migrate, readMigrations } from '../src/store/index.js'

// Migrations that change existing rows, each checked on a database migrated up to just before it and
// holding what an older release left there (docs/guides/operating.md#storage, "Migrations").

/** A PGlite database migrated up to (not including) the migration whose name starts with `prefix`. */
async function migratedUpTo(prefix: string) {
  const { PGlite } = await import('@electric-sql/pglite')
  const { vector } = await import('@electric-sql/pglite/vector')
  const { PGlitePool } = await import('../src/store/pglite/pglite-pool.js')
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

describe('migration 0043 (runs of deleted conversations marked)', () => {
  it('marks the runs of conversations already deleted, and only those', async () => {
    const { pglite, rest, end } = await migratedUpTo('0043_')
    try {
      await pglite.exec(`
        insert into users (id, name) values ('u1', 'una');
        insert into projects (id, owner_id, name) values ('p1', 'u1', 'p');
        insert into conversations (id, project_id, owner_id, deleted_at) values ('c1', 'p1', 'u1', null), ('c2', 'p1', 'u1', now());
        insert into runs (id, conversation_id, project_id, owner_id, model, status, approval_policy, max_iterations)
          values ('r1', 'c1', 'p1', 'u1', 'm', 'completed', 'ask', 10), ('r2', 'c2', 'p1', 'u1', 'm', 'completed', 'ask', 10);`)
      await rest()
      const { rows } = await pglite.query<{ id: string; conversation_deleted: boolean }>(
        'select id, conversation_deleted from runs order by id',
      )
      expect(rows).toEqual([
        { id: 'r1', conversation_deleted: false },
        { id: 'r2', conversation_deleted: true },
      ])
    } finally {
      await end()
    }
  })
})
