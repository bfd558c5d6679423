import { describe, expect, it } from 'vitest'
import { migratedUpTo } from './helpers/pglite-migrations.js'

// Migrations that change existing rows, each checked on a database migrated up to just before it and
// holding what an older release left there (docs/guides/operating.md#storage, "Migrations").

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

describe('migration 0041 (names unique regardless of case)', () => {
  it('keeps the oldest of names that already clash and appends the id to the others', async () => {
    const { pglite, rest, end } = await migratedUpTo('0041_')
    try {
      // What the race could leave behind before this migration.
      await pglite.query(
        `insert into users (id, name) values ('01J0000000000000000000000A', 'dora'), ('01J0000000000000000000000B', 'DORA'), ('01J0000000000000000000000C', 'eve')`,
      )
      await rest()
      const { rows } = await pglite.query<{ id: string; name: string }>('select id, name from users order by id')
      expect(rows).toEqual([
        { id: '01J0000000000000000000000A', name: 'dora' },
        { id: '01J0000000000000000000000B', name: 'DORA (01J0000000000000000000000B)' },
        { id: '01J0000000000000000000000C', name: 'eve' },
      ])
      await expect(
        pglite.query(`insert into users (id, name) values ('01J0000000000000000000000D', 'Eve')`),
      ).rejects.toThrow(/unique/)
    } finally {
      await end()
    }
  })
})
