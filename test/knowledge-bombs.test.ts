import { deflateSync } from 'node:zlib'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import yazl from 'yazl'
import { Ingestor, HashingEmbedder } from '../src/rag/index.js'
import type { Store } from '../src/store/index.js'
import { pino } from 'pino'
import { createPluginLogger } from '../src/cmdbus/index.js'
import { upload } from './helpers/documents.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { testDb } from '../src/store/test-access.js'

/** A DOCX whose document.xml is `xml` (stored compressed, as Word does). */
async function docxWith(xml: string): Promise<Buffer> {
  const zip = new yazl.ZipFile()
  zip.addBuffer(
    Buffer.from(
      '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>',
    ),
    '[Content_Types].xml',
  )
  zip.addBuffer(
    Buffer.from(
      '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="r1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>',
    ),
    '_rels/.rels',
  )
  zip.addBuffer(Buffer.from(xml), 'word/document.xml')
  zip.end()
  const chunks: Buffer[] = []
  for await (const chunk of zip.outputStream) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

const docxXml = (body: string) =>
  `<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>${body}</w:body></w:document>`

/** A one-page PDF whose content stream (deflated) is `content`; pdf.js rebuilds the missing xref. */
function pdfWithContent(content: string): Buffer {
  const stream = deflateSync(Buffer.from(content), { level: 9 })
  return Buffer.concat([
    Buffer.from(
      '%PDF-1.4\n1 0 obj <</Type/Catalog/Pages 2 0 R>> endobj\n2 0 obj <</Type/Pages/Kids[3 0 R]/Count 1>> endobj\n' +
        '3 0 obj <</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R/Resources<</Font<</F1 5 0 R>>>>>> endobj\n' +
        `4 0 obj <</Length ${stream.length}/Filter/FlateDecode>>\nstream\n`,
    ),
    stream,
    Buffer.from(
      '\nendstream endobj\n5 0 obj <</Type/Font/Subtype/Type1/BaseFont/Helvetica>> endobj\ntrailer <</Root 1 0 R>>\n%%EOF\n',
    ),
  ])
}

/** Latencies of `GET /api/me`, one request after another, until `done` resolves (and at least `atLeast` of them). */
async function measureWhile(server: TestServer, token: string, done: Promise<unknown>, atLeast = 0): Promise<number[]> {
  let finished = false
  void done.finally(() => (finished = true))
  const latencies: number[] = []
  while (!finished || latencies.length < atLeast) {
    const started = performance.now()
    const answer = await fetch(`${server.url}/api/me`, { headers: { authorization: `Bearer ${token}` } })
    await answer.arrayBuffer()
    expect(answer.status).toBe(200)
    latencies.push(performance.now() - started)
  }
  return latencies
}

function percentile(values: number[], fraction: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))] ?? 0
}

// Regression (docs/security.md#untrusted-documents): extraction ran on the main thread with no caps;
// small uploads froze or killed the server.
describe.each(testEngines())('hostile knowledge uploads on %s', (engine) => {
  let store: Store
  let server: TestServer
  let alice: TestUser
  let projectId: string

  beforeAll(async () => {
    store = await openTestStore(engine)
    // Limits low enough that the bombs below meet them quickly on a slow machine.
    server = await startTestServer(store, {
      extract: { heapMb: 96, rssMb: 384, timeoutMs: 20_000, limits: { maxChars: 2_000_000 } },
    })
    alice = await server.createUser()
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'Bombs' } })).body.id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  async function ingest(
    name: string,
    bytes: Buffer | string,
  ): Promise<{
    item: { ingestStatus: string; ingestError: string | null; chunkCount: number }
    latencies: number[]
    idle: number[]
  }> {
    // The same probe with nothing in flight, just before: what this machine answers when idle.
    const idle = await measureWhile(server, alice.token, new Promise((resolve) => setImmediate(resolve)), 40)
    const answer = await upload(`${server.url}/api/projects/${projectId}/knowledge`, alice.token, { name, bytes })
    expect(answer.status, JSON.stringify(answer.body)).toBe(202)
    const settled = (async () => {
      const deadline = Date.now() + 240_000
      for (;;) {
        const item = (await server.request('GET', `/api/knowledge/${answer.body.id}`, { token: alice.token })).body
        if (item.ingestStatus !== 'pending') return item
        if (Date.now() > deadline) throw new Error(`${name} still pending`)
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
    })()
    const latencies = await measureWhile(server, alice.token, settled)
    return { item: await settled, latencies, idle }
  }

  const bombs: Array<[string, () => Promise<Buffer | string>, RegExp | 'ready']> = [
    // 10 MB of XML in a few tens of KB: refused from the ZIP's directory, before anything inflates.
    [
      'ratio.docx',
      () => docxWith(docxXml('<w:p><w:r><w:t>a</w:t></w:r></w:p>'.repeat(300_000))),
      /inflates more than 200:1/,
    ],
    // Text that inflates modestly but is far more than the parser's heap can turn into HTML.
    [
      'heavy.docx',
      () =>
        docxWith(
          docxXml(
            Array.from(
              { length: 60_000 },
              (_, index) => `<w:p><w:r><w:t>paragraph ${index} ${Math.random().toString(36)}</w:t></w:r></w:p>`,
            ).join(''),
          ),
        ),
      /longer than|memory|parser stopped|took longer/,
    ],
    // A content stream that yields far more text than allowed.
    [
      'content.pdf',
      () =>
        Promise.resolve(
          pdfWithContent(
            `BT /F1 12 Tf ${'(aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa) Tj '.repeat(400_000)} ET`,
          ),
        ),
      /longer than|memory|parser stopped|took longer/,
    ],
    // 1.1 MB of nested divs.
    [
      'nested.html',
      () => Promise.resolve(`<html><body>${'<div>'.repeat(100_000)}deep${'</div>'.repeat(100_000)}</body></html>`),
      /nests elements deeper than/,
    ],
    // A large plain text within the limits: ingested, while other users stay served.
    [
      'large.txt',
      () =>
        Promise.resolve(
          Array.from(
            { length: 25_000 },
            (_, index) => `Line ${index}: the pangolin survey counted ${index % 97} animals near site ${index % 13}.`,
          ).join('\n'),
        ),
      'ready',
    ],
  ]

  it.each(bombs)(
    '%s: the server stays responsive (no /api/me stall of seconds) and the item ends with a reason',
    async (name, make, expected) => {
      const { item, latencies, idle } = await ingest(name, await make())
      if (expected === 'ready') {
        expect(item.ingestStatus, item.ingestError ?? '').toBe('ready')
        expect(item.chunkCount).toBeGreaterThan(100)
      } else {
        expect(item.ingestStatus).toBe('failed')
        expect(item.ingestError).toMatch(expected)
        expect(item.chunkCount).toBe(0)
      }
      console.log(
        `[bombs] ${engine} ${name}: ${item.ingestStatus} (${item.ingestError}); /api/me p50 ${percentile(latencies, 0.5).toFixed(1)} ms, p99 ${percentile(latencies, 0.99).toFixed(1)} ms over ${latencies.length} (idle p99 ${percentile(idle, 0.99).toFixed(1)} ms)`,
      )
      expect(latencies.length).toBeGreaterThan(0)
      // What the bombs did before extraction moved out of the server's thread: the event loop blocked for
      // seconds. p99 is about 100 ms on an idle machine (printed above); the bound leaves room for a loaded
      // one (the embedded database's batches share the thread), and scales past that with the idle p99.
      const bound = Math.max(2_000, 5 * percentile(idle, 0.99))
      expect(percentile(latencies, 0.99), `p99 over ${latencies.length} requests`).toBeLessThanOrEqual(bound)
      // And the next item still ingests.
      const after = await server.request('POST', `/api/projects/${projectId}/knowledge`, {
        token: alice.token,
        body: { title: `after ${name}`, text: 'Still working.' },
      })
      expect(after.body.ingestStatus).toBe('ready')
    },
    // Ingesting 25,000 lines on a loaded machine takes a while; the item's own deadline is 240 s.
    240_000,
  )
})

describe('an item whose ingestion never finishes', () => {
  let store: Store

  beforeAll(async () => {
    store = await openTestStore('pglite')
  })
  afterAll(async () => {
    await store?.close()
  })

  it('is failed after its attempts, not claimed for ever (a crash during ingestion counts)', async () => {
    const server = await startTestServer(store, { ingestMaxAttempts: 3 })
    let itemId: string
    try {
      const user = await server.createUser()
      const project = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'p' } })).body
        .id
      const answer = await upload(`${server.url}/api/projects/${project}/knowledge`, user.token, {
        name: 'notes.md',
        bytes: '# Notes\n\nSomething.',
      })
      itemId = answer.body.id
      await server.ingestor.idle()
    } finally {
      await server.close()
    }
    // As if three servers had each claimed it and died mid-way: the count is at its limit, the lease lapsed.
    await testDb(store)
      .updateTable('knowledge_items')
      .set({
        ingest_status: 'pending',
        ingest_attempts: 3,
        ingest_lease_until: new Date(Date.now() - 1000),
        chunk_count: 0,
      })
      .where('id', '=', itemId)
      .execute()
    const ingestor = new Ingestor({
      store,
      embedder: new HashingEmbedder(),
      log: createPluginLogger(pino({ level: 'silent' }), 'rag'),
      maxAttempts: 3,
    })
    try {
      await ingestor.start()
      await ingestor.idle()
    } finally {
      await ingestor.stop()
    }
    const row = await testDb(store)
      .selectFrom('knowledge_items')
      .select(['ingest_status', 'ingest_error', 'ingest_attempts'])
      .where('id', '=', itemId)
      .executeTakeFirstOrThrow()
    expect(row).toMatchObject({ ingest_status: 'failed', ingest_attempts: 4 })
    expect(row.ingest_error).toMatch(/started 3 times and never finished/)
    expect(
      await testDb(store).selectFrom('knowledge_chunks').select('id').where('item_id', '=', itemId).execute(),
    ).toEqual([])
  })
})

describe('an ingestion cut short by a graceful stop', () => {
  let store: Store
  beforeAll(async () => {
    store = await openTestStore('pglite')
  })
  afterAll(async () => {
    await store?.close()
  })

  it('gives the item back: its lease let go and the attempt uncounted, so the next start takes it at once', async () => {
    const server = await startTestServer(store)
    let itemId: string
    try {
      const user = await server.createUser()
      const project = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'p' } })).body
        .id
      const answer = await upload(`${server.url}/api/projects/${project}/knowledge`, user.token, {
        name: 'long.md',
        bytes: Array.from({ length: 200 }, (_, index) => `## Part ${index}\n\n${'Some words here. '.repeat(80)}`).join(
          '\n\n',
        ),
      })
      itemId = answer.body.id
      await server.ingestor.idle()
    } finally {
      await server.close()
    }
    await testDb(store)
      .updateTable('knowledge_items')
      .set({ ingest_status: 'pending', ingest_attempts: 0, ingest_lease_until: null, chunk_count: 0 })
      .where('id', '=', itemId)
      .execute()
    // An embedder that answers its first batch, then holds the second until the stop.
    const hashing = new HashingEmbedder()
    let calls = 0
    let reachedSecond: () => void = () => undefined
    const second = new Promise<void>((resolve) => (reachedSecond = resolve))
    let stopping = false
    const embedder = {
      id: hashing.id,
      dimensions: hashing.dimensions,
      batchSize: 8,
      embed: async (texts: readonly string[]) => {
        if (++calls > 1) {
          reachedSecond()
          while (!stopping) await new Promise((resolve) => setTimeout(resolve, 10))
        }
        return hashing.embed(texts)
      },
    }
    const ingestor = new Ingestor({
      store,
      embedder,
      log: createPluginLogger(pino({ level: 'silent' }), 'rag'),
      maxAttempts: 3,
    })
    await ingestor.start()
    await second
    stopping = true
    await ingestor.stop()
    const row = await testDb(store)
      .selectFrom('knowledge_items')
      .select(['ingest_status', 'ingest_attempts', 'ingest_lease_until'])
      .where('id', '=', itemId)
      .executeTakeFirstOrThrow()
    expect(row).toEqual({ ingest_status: 'pending', ingest_attempts: 0, ingest_lease_until: null })
  })
})
