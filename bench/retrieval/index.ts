/**
 * The retrieval bench (`BENCH_ONLY=rag npm run bench`): a generated corpus of mixed Chinese/English
 * chunks (100k on pg, 20k on PGlite), ingested through the same code as `POST …/knowledge`;
 * then query latency of each path and of the fused search, and recall@10 of the HNSW path against
 * exact search on the same embeddings.
 *
 * Env: BENCH_RAG_CHUNKS_PG (default 100000), BENCH_RAG_CHUNKS_PGLITE (20000), BENCH_RAG_QUERIES (200),
 * BENCH_RAG_SEED (42).
 */
import { performance } from 'node:perf_hooks'
import { pino } from 'pino'
import { createPluginLogger } from '../../src/cmdbus/index.js'
import { HashingEmbedder, Ingestor, prepareEmbeddings, Retriever } from '../../src/rag/index.js'
import {
  createProject,
  createUser,
  dropVectorIndexes,
  ensureVectorIndex,
  openStore,
  searchChunksVector,
  type Store,
} from '../../src/store/index.js'
import { ms, summarize, table, type Summary } from '../agent/stats.js'
import { createTempDatabase, createTempDir } from '../lib/resources.js'
import { Corpus, random } from './corpus.js'
import { sql, testDb } from '../../src/store/test-access.js'

interface EngineResult {
  engine: string
  chunks: number
  /** Chunks/s through chunking, embedding and insertion with every index in place. */
  ingestRate: number
  /** Chunks/s of the bulk load (HNSW index built afterwards). */
  bulkRate: number
  indexBuildSeconds: number
  fulltext: Summary
  vector: Summary
  hybrid: Summary
  recallAt10: number
}

const paragraphsPerItem = 7
const sampleChunks = 2000

function numberSetting(name: string, fallback: number): number {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const value = Number(raw)
  if (!Number.isInteger(value) || value < 1)
    throw new Error(`${name} must be a positive integer, got ${JSON.stringify(raw)}`)
  return value
}

export async function runRetrievalBench(databaseUrl: string | undefined): Promise<void> {
  const seed = numberSetting('BENCH_RAG_SEED', 42)
  const queries = numberSetting('BENCH_RAG_QUERIES', 200)
  const targets: Array<{ engine: 'PGlite' | 'pg'; chunks: number }> = [
    { engine: 'PGlite', chunks: numberSetting('BENCH_RAG_CHUNKS_PGLITE', 20_000) },
  ]
  if (databaseUrl) targets.push({ engine: 'pg', chunks: numberSetting('BENCH_RAG_CHUNKS_PG', 100_000) })
  console.log(
    `retrieval bench: seed ${seed}, hashing embedder (256 dims), ${queries} queries per path after 20 warm-up, recall@10 over 100 queries`,
  )
  const results: EngineResult[] = []
  for (const target of targets) {
    const temp =
      target.engine === 'pg' ? await createTempDatabase(databaseUrl!) : await createTempDir('plinth-bench-rag-')
    const store =
      target.engine === 'pg'
        ? await openStore({ databaseUrl: (temp as { url: string }).url, poolSize: 4 })
        : await openStore({ dataDir: (temp as { path: string }).path })
    try {
      console.log(`  ${target.engine}: loading ${target.chunks} chunks`)
      results.push(await benchEngine(target.engine, store, target.chunks, queries, seed))
    } finally {
      await store.close()
      await ('drop' in temp ? temp.drop() : temp.remove())
    }
  }
  console.log(
    table(
      [
        'retrieval (ms)',
        'chunks',
        'ingest/s',
        'bulk/s',
        'HNSW build s',
        'fulltext p50',
        'p95',
        'vector p50',
        'p95',
        'fused p50',
        'p95',
        'recall@10',
      ],
      results.map((result) => [
        result.engine,
        String(result.chunks),
        result.ingestRate.toFixed(0),
        result.bulkRate.toFixed(0),
        result.indexBuildSeconds.toFixed(1),
        ms(result.fulltext.p50),
        ms(result.fulltext.p95),
        ms(result.vector.p50),
        ms(result.vector.p95),
        ms(result.hybrid.p50),
        ms(result.hybrid.p95),
        result.recallAt10.toFixed(3),
      ]),
    ),
  )
  console.log(
    '  latencies in ms, in process (retrieval only, no HTTP); ingest/s: chunk + embed + insert with every index in place; goals on pg at 100k: fused p95 ≤ 30 ms, recall@10 ≥ 0.95',
  )
}

async function benchEngine(
  engine: string,
  store: Store,
  chunkCount: number,
  queryCount: number,
  seed: number,
): Promise<EngineResult> {
  const corpus = new Corpus(random(seed))
  const embedder = new HashingEmbedder(256)
  await prepareEmbeddings(store, embedder)
  const user = await createUser(store, 'bench')
  if ('error' in user) throw new Error('bench user exists')
  const project = await store.transaction((tx) => createProject(tx, user.id, { name: 'bench' }))
  const ingestor = new Ingestor({ store, embedder, log: createPluginLogger(pino({ level: 'silent' }), 'rag') })
  const item = (index: number) => {
    const topic = index % corpus.topicCount
    return {
      projectId: project.id,
      ownerId: user.id,
      title: `Document ${index}`,
      text: Array.from({ length: paragraphsPerItem }, () => corpus.paragraph(topic)).join('\n\n'),
    }
  }

  // Ingestion as a request does it, with the GIN and HNSW indexes maintained.
  const sampleItems = Math.ceil(Math.min(sampleChunks, chunkCount) / paragraphsPerItem)
  let started = performance.now()
  for (let index = 0; index < sampleItems; index++) {
    const input = item(index)
    const chunks = await ingestor.prepareText(input.text)
    await store.transaction((tx) => ingestor.insertText(tx, input, chunks))
  }
  const ingestRate = (sampleItems * paragraphsPerItem) / ((performance.now() - started) / 1000)

  // The rest in bulk, then the HNSW index built once (as `plinth knowledge reembed` does).
  await dropVectorIndexes(store)
  const bulkItems = Math.max(0, Math.ceil(chunkCount / paragraphsPerItem) - sampleItems)
  started = performance.now()
  for (let batch = 0; batch < bulkItems; batch += 50) {
    const inputs = Array.from({ length: Math.min(50, bulkItems - batch) }, (_, offset) =>
      item(sampleItems + batch + offset),
    )
    const prepared = await Promise.all(inputs.map((input) => ingestor.prepareText(input.text)))
    await store.transaction(async (tx) => {
      for (let index = 0; index < inputs.length; index++)
        await ingestor.insertText(tx, inputs[index]!, prepared[index]!)
    })
  }
  const bulkRate = bulkItems === 0 ? 0 : (bulkItems * paragraphsPerItem) / ((performance.now() - started) / 1000)
  started = performance.now()
  await ensureVectorIndex(store, embedder.dimensions, '1GB')
  const indexBuildSeconds = (performance.now() - started) / 1000
  await sql`analyze knowledge_chunks`.execute(testDb(store))
  const total = Number(
    (await sql<{ count: string }>`select count(*) from knowledge_chunks`.execute(testDb(store))).rows[0]!.count,
  )
  console.log(
    `  ${engine}: ${total} chunks (ingest ${ingestRate.toFixed(0)}/s, bulk ${bulkRate.toFixed(0)}/s, HNSW build ${indexBuildSeconds.toFixed(1)} s); querying`,
  )

  const retriever = new Retriever({ store, embedder, adapter: () => null })
  const timings = { fulltext: [] as number[], vector: [] as number[], hybrid: [] as number[] }
  for (let index = 0; index < 20 + queryCount; index++) {
    const text = corpus.query()
    for (const mode of ['fulltext', 'vector', 'hybrid'] as const) {
      const start = performance.now()
      await retriever.retrieve(user.id, text, { projectId: project.id, k: 10, mode })
      if (index >= 20) timings[mode].push(performance.now() - start)
    }
  }

  let overlap = 0
  const scope = { own: { ownerId: user.id, projectIds: [project.id] } }
  for (let index = 0; index < 100; index++) {
    const [embedding] = await embedder.embed([corpus.query()])
    const approximate = await searchChunksVector(store, scope, embedding!, embedder.dimensions, 10)
    const exact = await searchChunksVector(store, scope, embedding!, embedder.dimensions, 10, true)
    // Ties are common (many chunks share a query word): an approximate hit at least as close as the
    // exact tenth counts, whichever of the tied chunks it is.
    const tenth = exact.at(-1)?.score ?? 1
    overlap += approximate.filter((hit) => hit.score >= tenth - 1e-9).length / Math.max(1, exact.length)
  }
  return {
    engine,
    chunks: total,
    ingestRate,
    bulkRate,
    indexBuildSeconds,
    fulltext: summarize(timings.fulltext),
    vector: summarize(timings.vector),
    hybrid: summarize(timings.hybrid),
    recallAt10: overlap / 100,
  }
}
