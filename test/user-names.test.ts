import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { activeUserIds, Accounts, createUser, type Store } from '../src/store/index.js'
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
