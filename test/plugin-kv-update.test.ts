import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { changeMembers, readMembers } from '../plugins/rdm/members.js'
import { createPluginKv } from '../src/cmdbus/index.js'
import type { Store } from '../src/store/index.js'
import { createTestDatabase, testEngines, type TestDatabase } from './helpers/engines.js'

// `kv.update` (surface 1.8.0): a read and a write no other update of the key comes between, on every
// instance — what the rdm member table needs so that two owners' changes at once both land.
for (const engine of testEngines()) {
  describe(`plugin kv update (${engine})`, () => {
    let database: TestDatabase
    const stores: Store[] = []

    beforeAll(async () => {
      database = await createTestDatabase(engine)
      stores.push(await database.open())
      // Two instances on one Postgres; PGlite has one process.
      if (engine === 'postgres') stores.push(await database.open())
    })
    afterAll(async () => {
      for (const store of stores) await store.close()
      await database?.drop()
    })

    it('30 concurrent appends from every instance all land', async () => {
      const kvs = stores.map((store) => createPluginKv(store, 'counter'))
      await Promise.all(
        Array.from({ length: 30 }, (_, index) =>
          kvs[index % kvs.length]!.update<string[]>('list', (current) => [...(current ?? []), `item-${index}`]),
        ),
      )
      const stored = (await kvs[0]!.get<string[]>('list')) ?? []
      expect(stored).toHaveLength(30)
      expect(new Set(stored).size).toBe(30)
    })

    it('answers what it stored; undefined deletes the key', async () => {
      const kv = createPluginKv(stores[0]!, 'counter')
      expect(await kv.update('n', (current) => (typeof current === 'number' ? current + 1 : 1))).toBe(1)
      expect(await kv.update('n', (current) => (typeof current === 'number' ? current + 1 : 1))).toBe(2)
      expect(await kv.update('n', () => undefined)).toBeUndefined()
      expect(await kv.get('n')).toBeUndefined()
    })

    it('rdm: a member removed and another added at once, from two places, are both applied', async () => {
      for (let attempt = 0; attempt < 10; attempt++) {
        const projectId = `p${attempt}`
        const kvs = stores.map((store) => createPluginKv(store, 'rdm'))
        await changeMembers(kvs[0]!, projectId, () => ['alice'])
        await Promise.all([
          changeMembers(kvs[0]!, projectId, (members) => members.filter((member) => member !== 'alice')),
          changeMembers(kvs.at(-1)!, projectId, (members) => [...members, 'bob']),
          changeMembers(kvs[0]!, projectId, (members) => [...members, 'carol']),
        ])
        expect(await readMembers(kvs[0]!, projectId)).toEqual(['bob', 'carol'])
      }
    })
  })
}
