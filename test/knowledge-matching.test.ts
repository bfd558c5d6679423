import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { sql, testDb } from '../src/store/test-access.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// Mixed Chinese and English: a word of letters or digits ends where Chinese begins, and knowledge or
// memories stored under the earlier tokenizer are indexed again at start (docs/guides/knowledge-and-search.md).
for (const engine of testEngines()) {
  describe(`searching mixed Chinese and English on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let projectId: string

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store)
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: '年度' } })).body
        .id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const hits = async (q: string, mode = 'fulltext'): Promise<number> => {
      const answer = await server.request(
        'GET',
        `/api/projects/${projectId}/search?mode=${mode}&q=${encodeURIComponent(q)}`,
        { token: alice.token },
      )
      expect(answer.status).toBe(200)
      return answer.body.items.length
    }
    const memoryHits = async (q: string): Promise<number> =>
      (await server.request('GET', `/api/memories?q=${encodeURIComponent(q)}`, { token: alice.token })).body.items
        .length

    it('finds every word of a text that runs Chinese on from digits and Latin words, and a single character', async () => {
      const added = await server.request('POST', `/api/projects/${projectId}/knowledge`, {
        token: alice.token,
        body: { title: '年度', text: '2024年预算报告已经提交。请查看Q3季度的OKR目标。使用Python编程。袋熊喜欢吃草' },
      })
      expect(added.status).toBe(201)
      for (const word of ['预算', '提交', '季度', 'OKR', 'Q3', '2024', 'Python', '编程', '查看', '熊'])
        expect([word, await hits(word)]).toEqual([word, 1])
      expect(await hits('预算', 'hybrid')).toBe(1)
    })

    it('with the built-in hashing embedder, hybrid search finds no text that shares no word with the query', async () => {
      for (const [title, text] of [
        ['echidna', 'Echidna spines are modified hairs.'],
        ['dns', 'Rotate the resolvers.'],
        ['tea', 'Brew green tea at eighty degrees for two minutes.'],
        ['lag', 'Check replication lag before failover.'],
        ['theme', 'User prefers light mode again.'],
      ])
        expect(
          (
            await server.request('POST', `/api/projects/${projectId}/knowledge`, {
              token: alice.token,
              body: { title, text },
            })
          ).status,
        ).toBe(201)
      // Words none of those texts hold: any hit would be a collision of hashed features.
      const unrelated =
        'zebra igloo zeppelin saddle wizard canyon footerjunk prace marble violin tractor pepper glacier lantern quartz harbor falcon meadow pirate rocket sandal tulip umbrella walnut yacht anchor bishop cactus dolphin ember fossil goblin hammock iceberg jigsaw kettle lobster mango nectar orchid parrot quiver raven sphinx trumpet unicorn velvet whistle yodel zinnia'.split(
          ' ',
        )
      const found: string[] = []
      for (const word of unrelated) if ((await hits(word, 'hybrid')) > 0) found.push(word)
      expect(found).toEqual([])
      // A word they share is still found, by both paths.
      expect(await hits('resolvers', 'hybrid')).toBe(1)
    })

    it('indexes again at start what the earlier tokenizer stored, knowledge and memories alike', async () => {
      const remembered = await server.request('POST', '/api/memories', {
        token: alice.token,
        body: { text: '喜欢用Python编程', key: 'language' },
      })
      expect(remembered.status).toBe(201)
      // As the earlier tokenizer left them: `python编程` one token, and the revision it recorded.
      // Their embeddings stand for what the hashing embedder made of those tokens: unrelated to 编程.
      const unrelated = sql`('[1' || repeat(',0', 255) || ']')::vector`
      await sql`update knowledge_chunks set search = to_tsvector('simple', 'python编程'), embedding = ${unrelated}`.execute(
        testDb(store),
      )
      await sql`update memories set search = to_tsvector('simple', 'python编程'), embedding = ${unrelated}`.execute(
        testDb(store),
      )
      await sql`update rag_settings set tokenizer = 1`.execute(testDb(store))
      expect(await hits('编程')).toBe(0)
      expect(await hits('编程', 'hybrid')).toBe(0)
      expect(await memoryHits('编程')).toBe(0)

      await server.close()
      server = await startTestServer(store)
      const deadline = Date.now() + 60_000
      for (;;) {
        const { rows } = await sql<{ tokenizer: number }>`select tokenizer from rag_settings`.execute(testDb(store))
        if (rows[0]!.tokenizer === 2) break
        if (Date.now() > deadline) throw new Error('the stored texts were never indexed again')
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      expect(await hits('编程')).toBe(1)
      expect(await hits('预算')).toBe(1)
      expect(await hits('编程', 'hybrid')).toBe(1)
      expect(await memoryHits('编程')).toBe(1)
    })
  })
}
