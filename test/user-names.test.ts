import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { activeUserIds, Accounts, createUser, migrate, readMigrations, type Store } from '../src/store/index.js'
import { testDb } from '../src/store/test-access.js'
import { openTestStore, testEngines } from './helpers/engines.js'

// A user's name is unique regardless of case (docs/reference/cli.md), also for requests sent together.

for (const engine of testEngines()) {
  describe(`user names on ${engine}`, () => {
    let store: Store
    beforeAll(async () => {
      store = await openTestStore(engine)
    })
    afterAll(async () => {
      await store?.close()
    })

    it('names that differ only in case, created at once: one user, the others name_taken', async () => {
      for (let round = 0; round < 5; round++) {
        const names = [`casex${round}`, `CASEX${round}`, `casex${round}`, `CaseX${round}`]
        const answers = await Promise.all(names.map((name) => createUser(store, name)))
        expect(
          answers.filter((answer) => !('error' in answer)),
          `round ${round}`,
        ).toHaveLength(1)
        expect(answers.filter((answer) => 'error' in answer && answer.error === 'name_taken')).toHaveLength(3)
      }
    })

    it('the old name of a user migration 0041 renamed names nobody, not the user it clashed with', async () => {
      // What 0041 leaves of `Dora` and a younger `DORA`: the younger one's id appended to its name.
      const older = '01J00000000000000000DORA0A'
      const younger = '01J00000000000000000DORA0B'
      await testDb(store)
        .insertInto('users')
        .values([
          { id: older, name: 'Dora' },
          { id: younger, name: `DORA (${younger})` },
        ])
        .execute()
      // A designated approver written as `DORA` before the upgrade must not become Dora.
      expect(await activeUserIds(store, ['DORA'])).toEqual([])
      expect(await activeUserIds(store, ['Dora'])).toEqual([older])
      expect(await activeUserIds(store, ['dora'])).toEqual([older])
      expect(await activeUserIds(store, [`DORA (${younger})`, younger])).toEqual([younger])
      // Nor a CLI command's <user>.
      const accounts = new Accounts(store)
      expect(await accounts.findUser('DORA')).toBeUndefined()
      expect((await accounts.findUser('dora'))?.id).toBe(older)
      expect((await accounts.findUser(younger))?.id).toBe(younger)
    })
  })
}

describe('migration 0041 (names unique regardless of case)', () => {
  it('keeps the oldest of names that already clash and appends the id to the others', async () => {
    const { PGlite } = await import('@electric-sql/pglite')
    const { vector } = await import('@electric-sql/pglite/vector')
    const { PGlitePool } = await import('../src/store/pglite/pglite-pool.js')
    const pglite = await PGlite.create({ extensions: { vector } })
    const pool = new PGlitePool(pglite)
    try {
      const migrations = await readMigrations()
      const at = migrations.findIndex((migration) => migration.name.startsWith('0041_'))
      await migrate(pool, migrations.slice(0, at))
      // What the race could leave behind before this migration.
      await pglite.query(
        `insert into users (id, name) values ('01J0000000000000000000000A', 'dora'), ('01J0000000000000000000000B', 'DORA'), ('01J0000000000000000000000C', 'eve')`,
      )
      await migrate(pool, migrations)
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
      await pool.end()
    }
  })
})
