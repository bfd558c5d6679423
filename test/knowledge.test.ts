import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { HashingEmbedder, Retriever } from '../src/rag/index.js'
import type { Store } from '../src/store/index.js'
import { makeCjkPdf, makeDocx, makeImageOnlyPdf, makePdf, makeUndecodablePdf, upload } from './helpers/documents.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { openSse } from './helpers/sse-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { testDb } from '../src/store/test-access.js'

const missingId = '01ARZ3NDEKTSV4RRFFQ69G5FAV'

for (const engine of testEngines()) {
  describe(`knowledge and search on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let bob: TestUser
    let projectId: string

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { maxKnowledgeFileBytes: 200_000 })
      alice = await server.createUser()
      bob = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'knowledge' } }))
        .body.id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const add = (title: string, text: string, token = alice.token, project = projectId) =>
      server.request('POST', `/api/projects/${project}/knowledge`, { token, body: { title, text } })
    const search = (q: string, query = '', token = alice.token, project = projectId) =>
      server.request('GET', `/api/projects/${project}/search?q=${encodeURIComponent(q)}${query}`, { token })
    const waitReady = async (itemId: string, token = alice.token) => {
      await server.ingestor.idle()
      for (let attempt = 0; attempt < 100; attempt++) {
        const item = (await server.request('GET', `/api/knowledge/${itemId}`, { token })).body
        if (item.ingestStatus !== 'pending') return item
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      throw new Error('ingestion did not finish')
    }

    it('adds a text item (201, ready), lists it, reads its chunks, publishes and deletes it, with events', async () => {
      const stream = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: alice.token })
      const created = await add(
        'Runbook',
        '# Failover\n\nWhen the primary database fails, promote the replica.\n\n## Checks\n\nVerify replication lag first.',
      )
      expect(created.status).toBe(201)
      expect(created.body).toMatchObject({
        title: 'Runbook',
        status: 'draft',
        ingestStatus: 'ready',
        source: 'text',
        chunkCount: 2,
        shared: false,
        projectId,
        ownerId: alice.user.id,
      })
      const item = (await server.request('GET', `/api/knowledge/${created.body.id}`, { token: alice.token })).body
      expect(item.chunks.map((chunk: { heading: string }) => chunk.heading)).toEqual(['Failover', 'Failover > Checks'])
      const listed = await server.request('GET', `/api/projects/${projectId}/knowledge`, { token: alice.token })
      expect(listed.body.items.map((entry: { id: string }) => entry.id)).toContain(created.body.id)
      const published = await server.request('POST', `/api/knowledge/${created.body.id}/publish`, {
        token: alice.token,
      })
      expect(published.body).toMatchObject({ status: 'published', publishedAt: expect.any(String) })
      expect((await server.request('DELETE', `/api/knowledge/${created.body.id}`, { token: alice.token })).status).toBe(
        204,
      )
      expect((await server.request('GET', `/api/knowledge/${created.body.id}`, { token: alice.token })).status).toBe(
        404,
      )
      const events = await stream.waitFor(5)
      stream.close()
      expect(events.map((event) => event.event).filter((type) => type?.startsWith('knowledge.'))).toEqual([
        'knowledge.created',
        'knowledge.ingested',
        'knowledge.published',
        'knowledge.deleted',
      ])
    })

    it('shows no chunks of an item still ingesting (an interrupted ingestion leaves some behind)', async () => {
      const created = await add('Partial', '# One\n\nFirst part.\n\n## Two\n\nSecond part.')
      expect(created.body.chunkCount).toBe(2)
      // As after a crash mid-ingestion: chunks written, the item not yet ready.
      await testDb(store)
        .updateTable('knowledge_items')
        .set({ ingest_status: 'pending' })
        .where('id', '=', created.body.id)
        .execute()
      const item = await server.request('GET', `/api/knowledge/${created.body.id}`, { token: alice.token })
      expect([item.body.ingestStatus, item.body.chunks]).toEqual(['pending', []])
      const chunks = await server.request('GET', `/api/knowledge/${created.body.id}/chunks`, { token: alice.token })
      expect([chunks.body.items, chunks.body.nextCursor]).toEqual([[], null])
      await server.request('DELETE', `/api/knowledge/${created.body.id}`, { token: alice.token })
    })

    it('finds Chinese by bigrams (项目建议书 in 编写项目建议书的要点), mixed text, with snippets', async () => {
      const target = await add('写作指南', '# 编写项目建议书的要点\n\n项目建议书要写清楚预算 budget 和范围 scope。')
      await add('Other', 'Nothing related: a note about lunch and the weather in Paris.')
      const answer = await search('项目建议书')
      expect(answer.status).toBe(200)
      const first = answer.body.items[0]
      expect(first).toMatchObject({ itemId: target.body.id, title: '写作指南', shared: false, fulltextRank: 1 })
      expect(first.highlights.length).toBeGreaterThan(0)
      const [start, end] = first.highlights[0]
      expect(first.snippet.slice(start, end)).toBe('项目建议书')
      const mixed = await search('budget 预算')
      expect(mixed.body.items[0].itemId).toBe(target.body.id)
      const fulltextOnly = await search('项目建议书', '&mode=fulltext&k=1')
      expect(fulltextOnly.body.items).toHaveLength(1)
      // Deleted items are never found.
      await server.request('DELETE', `/api/knowledge/${target.body.id}`, { token: alice.token })
      expect((await search('项目建议书', '&mode=fulltext')).body.items).toEqual([])
    })

    it(
      'ingests uploaded .md, .txt, .html, .pdf and .docx files in the background (202)',
      { timeout: 120_000 },
      async () => {
        const files = [
          { name: 'notes.md', bytes: '# Deploy\n\nThe canary stage runs for ten minutes.', query: 'canary stage' },
          { name: 'plain.txt', bytes: 'Kubernetes pods restart on OOM kills.', query: 'pods restart' },
          {
            name: 'page.html',
            bytes:
              '<html><head><script>var x = 1</script></head><body><h1>Rollback</h1><p>Use the blue green switch.</p></body></html>',
            query: 'blue green switch',
          },
          {
            name: 'report.pdf',
            bytes: await makePdf(['Incident report: the disk filled up.', 'Second page mentions the zebra migration.']),
            query: 'zebra migration',
          },
          {
            name: 'proposal.docx',
            bytes: await makeDocx('项目建议书', ['编写项目建议书的要点: budget and scope.', 'Quokka testing plan.']),
            query: 'quokka',
          },
        ]
        for (const file of files) {
          const answer = await upload(`${server.url}/api/projects/${projectId}/knowledge`, alice.token, file)
          expect(answer.status, file.name).toBe(202)
          expect(answer.body).toMatchObject({ ingestStatus: 'pending', source: 'file', filename: file.name })
          const ready = await waitReady(answer.body.id)
          expect(ready.ingestStatus, `${file.name}: ${ready.ingestError}`).toBe('ready')
          const hits = (await search(file.query)).body.items
          expect(hits[0]?.itemId, file.name).toBe(answer.body.id)
        }
        const html = (await search('blue green switch')).body.items[0]
        expect(html.heading).toBe('Rollback')
        expect(html.text).not.toContain('var x')
      },
    )

    it('marks a corrupted PDF or DOCX failed with a readable reason, and nothing else breaks', async () => {
      for (const [name, bytes, reason] of [
        ['broken.pdf', '%PDF-1.4\nthis is not really a pdf', /PDF could not be read|Invalid PDF/],
        ['broken.docx', 'PK\u0003\u0004 not a zip at all', /DOCX could not be read/],
        ['fake.pdf', 'plain text pretending', /not a PDF/],
      ] as const) {
        const answer = await upload(`${server.url}/api/projects/${projectId}/knowledge`, alice.token, { name, bytes })
        expect(answer.status).toBe(202)
        const failed = await waitReady(answer.body.id)
        expect(failed).toMatchObject({ ingestStatus: 'failed', chunkCount: 0 })
        expect(failed.ingestError).toMatch(reason)
        // Published, it would be found by no one: refused, and it stays a draft.
        const publish = await server.request('POST', `/api/knowledge/${answer.body.id}/publish`, { token: alice.token })
        expect([publish.status, publish.body.code]).toEqual([409, 'knowledge_not_ingested'])
      }
      expect((await add('Still fine', 'After the broken files, ingestion still works.')).body.ingestStatus).toBe(
        'ready',
      )
    })

    // Regression: a Type0 font over a predefined CMap (UniGB-UCS2-H) and a non-embedded STSong-Light
    // — older Chinese office and government PDFs — ingested `ready` with only the Latin text.
    it(
      'reads the Chinese of a PDF whose font uses a predefined CMap (UniGB-UCS2-H, STSong-Light)',
      { timeout: 120_000 },
      async () => {
        const answer = await upload(`${server.url}/api/projects/${projectId}/knowledge`, alice.token, {
          name: 'gov.pdf',
          bytes: makeCjkPdf('Annual filing', '中文知识库的建设方案'),
        })
        expect(answer.status).toBe(202)
        const ready = await waitReady(answer.body.id)
        expect(ready.ingestStatus, ready.ingestError).toBe('ready')
        expect(ready.chunks.map((chunk: { text: string }) => chunk.text).join('\n')).toContain('中文知识库的建设方案')
        const hits = (await search('中文知识库')).body.items
        expect(hits[0]).toMatchObject({ itemId: answer.body.id, fulltextRank: 1 })
        const [start, end] = hits[0].highlights[0]
        expect(hits[0].snippet.slice(start, end)).toBe('中文知识库')
      },
    )

    it(
      'fails a PDF with no text (a scan) or with undecodable text, and a text file that is not UTF-8, saying so on the item',
      { timeout: 120_000 },
      async () => {
        for (const [name, bytes, reason] of [
          ['scan.pdf', makeImageOnlyPdf(), /no extractable text: the PDF may be scanned images/],
          ['garbled.pdf', makeUndecodablePdf(), /no extractable text: .*could not be decoded/],
          // 中文知识库 in GBK: every byte sequence is invalid UTF-8.
          ['gbk.txt', Buffer.from('d6d0cec4d6aacab6bfe2', 'hex'), /could not be decoded .*save it as UTF-8/],
        ] as const) {
          const answer = await upload(`${server.url}/api/projects/${projectId}/knowledge`, alice.token, { name, bytes })
          expect(answer.status).toBe(202)
          const failed = await waitReady(answer.body.id)
          expect(failed, name).toMatchObject({ ingestStatus: 'failed', chunkCount: 0, chunks: [] })
          expect(failed.ingestError, name).toMatch(reason)
          const listed = (
            await server.request('GET', `/api/projects/${projectId}/knowledge`, { token: alice.token })
          ).body.items.find((item: { id: string }) => item.id === answer.body.id)
          expect(listed.ingestError).toMatch(reason)
        }
      },
    )

    it(
      'drops the navigation, header, footer and asides of an HTML page, and keeps its tables as Markdown tables',
      { timeout: 120_000 },
      async () => {
        const html = `<html><body>
        <header><a href="/">Acme intranet home</a> <span>Gazpacho portal banner</span></header>
        <nav><ul><li><a href="/a">Gazpacho menu one</a></li><li><a href="/b">Sitemap</a></li></ul></nav>
        <main><article><header><h1>Capacity plan</h1></header><p>The quetzal cluster grows next quarter.</p>
          <table><thead><tr><th>Region</th><th>Nodes</th></tr></thead>
          <tbody><tr><td>eu-west</td><td>12</td></tr><tr><td>us-east</td><td>30</td></tr></tbody></table>
        </article></main>
        <aside>Related: gazpacho recipes</aside>
        <footer>© Acme, gazpacho legal notice</footer>
      </body></html>`
        const answer = await upload(`${server.url}/api/projects/${projectId}/knowledge`, alice.token, {
          name: 'plan.html',
          bytes: html,
        })
        const ready = await waitReady(answer.body.id)
        expect(ready.ingestStatus, ready.ingestError).toBe('ready')
        const text = ready.chunks.map((chunk: { text: string }) => chunk.text).join('\n')
        expect(text).toContain('The quetzal cluster grows next quarter.')
        // An article's own header is its title, kept (and chunks are headed by it).
        expect(ready.chunks[0].heading).toBe('Capacity plan')
        expect(text).not.toMatch(/gazpacho|Acme|Sitemap/i)
        expect(text).toMatch(/\| Region \| Nodes \|\n\| -+ \| -+ \|\n\| eu-west \| 12 +\|\n\| us-east \| 30 +\|/)
        expect(
          (await search('gazpacho')).body.items.filter((hit: { itemId: string }) => hit.itemId === answer.body.id),
        ).toEqual([])
        expect((await search('us-east')).body.items[0]).toMatchObject({ itemId: answer.body.id, fulltextRank: 1 })
      },
    )

    it('answers bad input with the right problem', async () => {
      const token = alice.token
      const expectCode = (answer: { status: number; body: { code: string } }, status: number, code: string) => {
        expect([answer.status, answer.body.code]).toEqual([status, code])
      }
      expectCode(await search(''), 400, 'validation_failed')
      expectCode(await search('   \t '), 400, 'validation_failed')
      expectCode(await search('x', '&k=0'), 400, 'validation_failed')
      expectCode(await search('x', '&k=51'), 400, 'validation_failed')
      expectCode(
        await upload(`${server.url}/api/projects/${projectId}/knowledge`, token, { name: 'tool.exe', bytes: 'MZ' }),
        415,
        'unsupported_media_type',
      )
      expectCode(
        await upload(`${server.url}/api/projects/${projectId}/knowledge`, token, {
          name: 'big.txt',
          bytes: 'x'.repeat(250_000),
        }),
        413,
        'payload_too_large',
      )
      // A multipart body cut short, one without a boundary, or with two files: the client's mistake, a 400.
      const raw = async (contentType: string, body: string) => {
        const response = await fetch(`${server.url}/api/projects/${projectId}/knowledge`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': contentType },
          body,
        })
        return { status: response.status, body: (await response.json()) as { code: string } }
      }
      const part = (name: string) =>
        `--zzz\r\nContent-Disposition: form-data; name="file"; filename="${name}"\r\nContent-Type: text/plain\r\n\r\nabc\r\n`
      expectCode(await raw('multipart/form-data; boundary=zzz', part('a.md').slice(0, -2)), 400, 'bad_request')
      expectCode(await raw('multipart/form-data', part('a.md') + '--zzz--\r\n'), 400, 'bad_request')
      expectCode(
        await raw('multipart/form-data; boundary=zzz', part('a.md') + part('b.md') + '--zzz--\r\n'),
        400,
        'validation_failed',
      )
      const extra = part('a.md') + '--zzz\r\nContent-Disposition: form-data; name="color"\r\n\r\nred\r\n--zzz--\r\n'
      expectCode(await raw('multipart/form-data; boundary=zzz', extra), 400, 'validation_failed')
      // Only `file` carries the file; a text part named `file` is not one.
      const renamed = part('a.md').replace('name="file"', 'name="attachment"') + '--zzz--\r\n'
      const misnamed = await raw('multipart/form-data; boundary=zzz', renamed)
      expectCode(misnamed, 400, 'validation_failed')
      expect(JSON.stringify(misnamed.body)).toContain('body.attachment')
      const textFile = '--zzz\r\nContent-Disposition: form-data; name="file"\r\n\r\nhello\r\n--zzz--\r\n'
      const notAFile = await raw('multipart/form-data; boundary=zzz', textFile)
      expectCode(notAFile, 400, 'validation_failed')
      expect(JSON.stringify(notAFile.body)).toContain('must be a file')
      // A file name too long for a title names the file name, not a title nobody sent.
      const longName = await raw('multipart/form-data; boundary=zzz', part(`${'n'.repeat(600)}.md`) + '--zzz--\r\n')
      expectCode(longName, 400, 'validation_failed')
      expect(JSON.stringify(longName.body)).toContain('body.file.filename')
      expect(JSON.stringify(longName.body)).not.toContain('body.title')
      // A file part with an empty name names nothing: refused, like an empty title.
      const unnamed =
        '--zzz\r\nContent-Disposition: form-data; name="file"; filename=""\r\nContent-Type: text/plain\r\n\r\nhello\r\n--zzz--\r\n'
      const noName = await raw('multipart/form-data; boundary=zzz', unnamed)
      expectCode(noName, 400, 'validation_failed')
      expect(JSON.stringify(noName.body)).toContain('body.file.filename')
      // Neither JSON nor multipart: 415, naming both ways in.
      const plain = await raw('text/plain', 'hello')
      expectCode(plain, 415, 'unsupported_media_type')
      expect(JSON.stringify(plain.body)).toContain('multipart/form-data')
      const published = await add('Publish me', 'text')
      const strict = await server.request('POST', `/api/knowledge/${published.body.id}/publish`, {
        token,
        body: { x: 1 },
      })
      expectCode(strict, 400, 'validation_failed')
      expectCode(await add('t'.repeat(501), 'text'), 400, 'validation_failed')
      expectCode(await add('title', ''), 400, 'validation_failed')
      const other = (await server.request('POST', '/api/projects', { token: bob.token, body: { name: 'bobs' } })).body
        .id
      expectCode(await search('x', '', alice.token, other), 404, 'not_found')
      expectCode(await search('x', '', alice.token, missingId), 404, 'not_found')
      const bobs = await add('Bob draft', 'secret plans', bob.token, other)
      expectCode(await server.request('POST', `/api/knowledge/${bobs.body.id}/publish`, { token }), 404, 'not_found')
      expectCode(await server.request('DELETE', `/api/knowledge/${bobs.body.id}`, { token }), 404, 'not_found')
      expectCode(await server.request('GET', `/api/knowledge/${bobs.body.id}`, { token }), 404, 'not_found')
      expectCode(await add('In bob’s project', 'x', token, other), 404, 'not_found')
    })

    it('full text finds a word’s other forms: singular and plural, the base of -ed and -ing', async () => {
      const own = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'forms' } })).body
        .id
      const wombats = await add(
        'Zoo notes',
        'Two wombats arrived; the keepers produce a feeding plan.',
        alice.token,
        own,
      )
      const budget = await add('Finance', 'The quarterly budget may drop fast.', alice.token, own)
      for (const [query, item] of [
        ['wombat', wombats.body.id],
        ['produced', wombats.body.id],
        ['budgets', budget.body.id],
        ['dropping', budget.body.id],
      ] as const) {
        const hits = (await search(query, '&mode=fulltext', alice.token, own)).body.items as Array<{ itemId: string }>
        expect(
          hits.map((hit) => hit.itemId),
          query,
        ).toContain(item)
      }
    })

    it('drops vector-only hits below the relevance floor, keeping every real match', async () => {
      const own = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'floor' } })).body
        .id
      const match = await add('Okapi care', 'The okapi enclosure needs shade and fresh leaves.', alice.token, own)
      const second = await add('Okapi feeding', 'Feed the okapi twice a day.', alice.token, own)
      for (const [title, text] of [
        ['Lunch', 'A note about lunch and the weather in Paris.'],
        ['Pods', 'Kubernetes pods restart on OOM kills.'],
        ['Canary', 'The canary stage runs for ten minutes.'],
        ['Budget', 'The budget review is on Friday.'],
      ])
        await add(title!, text!, alice.token, own)
      const hits = (await search('okapi enclosure', '', alice.token, own)).body.items
      expect(hits.map((hit: { itemId: string }) => hit.itemId).sort()).toEqual([match.body.id, second.body.id].sort())
      expect(hits.every((hit: { fulltextRank: number | null }) => hit.fulltextRank !== null)).toBe(true)
      // mode=vector is the nearest neighbours as they are, closest first.
      const vector = (await search('okapi enclosure', '&mode=vector', alice.token, own)).body.items
      expect(vector).toHaveLength(6)
      expect(vector.slice(0, 2).map((hit: { itemId: string }) => hit.itemId)).toEqual([match.body.id, second.body.id])
      // The floor is configurable (knowledge.minSimilarity); at -1 every nearest neighbour comes back.
      const unfloored = new Retriever({
        store,
        embedder: new HashingEmbedder(),
        adapter: () => null,
        minSimilarity: -1,
      })
      expect(await unfloored.retrieve(alice.user.id, 'okapi enclosure', { projectId: own })).toHaveLength(6)
    })

    it('refuses an unknown search mode with a 400 naming the modes', async () => {
      const answer = await search('x', '&mode=semantic')
      expect(answer.status).toBe(400)
      expect(answer.body).toMatchObject({
        code: 'validation_failed',
        errors: [{ path: 'querystring.mode', message: 'must be one of hybrid, fulltext, vector' }],
      })
      expect(answer.body.detail).toBe('querystring.mode: must be one of hybrid, fulltext, vector')
      const all = await server.request('GET', '/api/search?q=x&mode=semantic', { token: alice.token })
      expect([all.status, all.body.code, all.body.detail]).toEqual([
        400,
        'validation_failed',
        'querystring.mode: must be one of hybrid, fulltext, vector',
      ])
    })

    it('treats query syntax as text and takes 10 KB of CJK in one query', async () => {
      await add('Syntax', 'The brackets and ampersands of Boolean logic.')
      for (const q of [
        "'a & | !b:*'",
        '"unclosed',
        'back\\slash \\\\',
        "'; drop table knowledge_chunks; --",
        '!!! &&& |||',
        ':* <-> <2>',
      ]) {
        const answer = await search(q)
        expect(answer.status, q).toBe(200)
        expect(Array.isArray(answer.body.items)).toBe(true)
      }
      const cjk = '项目建议书预算范围'.repeat(380)
      expect(Buffer.byteLength(cjk)).toBeGreaterThan(10_000)
      const answer = await search(cjk)
      expect(answer.status).toBe(200)
    })

    it('searches every project the caller may see with GET /api/search', async () => {
      const second = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'second' } }))
        .body.id
      const item = await add('Second project note', 'The walrus protocol is documented here.', alice.token, second)
      const answer = await server.request('GET', `/api/search?q=${encodeURIComponent('walrus protocol')}`, {
        token: alice.token,
      })
      expect(answer.body.items[0]).toMatchObject({ itemId: item.body.id, projectId: second })
      // Bob may find his own things, never Alice's.
      const bobs = (await server.request('GET', `/api/search?q=walrus`, { token: bob.token })).body.items
      expect(bobs.every((hit: { ownerId: string }) => hit.ownerId === bob.user.id)).toBe(true)
    })
  })
}
