import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ensureVectorIndex, type Store } from '../src/store/index.js'
import { createTestDatabase, testEngines, type TestDatabase } from './helpers/engines.js'

// Instances started together on one Postgres (docs/guides/scaling.md) each run their start-up steps at
// once; none may fail because another does the same.
const engines = testEngines()
if (!engines.includes('postgres'))
  console.warn('[plinth tests] skipping the concurrent start-up tests: they need Postgres (TEST_DATABASE_URL)')

describe.skipIf(!engines.includes('postgres'))('instances starting together', () => {
  let database: TestDatabase
  const stores: Store[] = []
  beforeAll(async () => {
    database = await createTestDatabase('postgres')
    for (let index = 0; index < 4; index++) stores.push(await database.open())
  })
  afterAll(async () => {
    for (const store of stores) await store.close()
    await database?.drop()
  })

  it('each ensures the vector index at once, and all succeed', async () => {
    for (const dimensions of [8, 16]) {
      const results = await Promise.allSettled(stores.map((store) => ensureVectorIndex(store, dimensions)))
      expect(results.filter((result) => result.status === 'rejected')).toEqual([])
    }
  })
})
