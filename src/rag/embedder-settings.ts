import {
  chunksAfter,
  countAllMemories,
  countEmbeddingsNotOf,
  countKnowledgeChunks,
  memoriesAfter,
  updateMemoryEmbeddings,
  dropVectorIndexes,
  ensureVectorIndex,
  getRagSettings,
  setRagSettings,
  setRagTokenizer,
  updateChunkEmbeddings,
  vectorIndexFit,
  type Store,
} from '../store/index.js'
import type { Embedder } from './embeddings.js'
import { tokenizerVersion } from './text.js'

/** The configured embedder is not the one the stored knowledge was embedded with. */
export class EmbedderMismatchError extends Error {
  readonly code = 'embedder_mismatch'
  constructor(recorded: { embedder: string; dimensions: number }, configured: Embedder) {
    super(
      `the knowledge and memories in this database were embedded with ${recorded.embedder} (${recorded.dimensions} dimensions), but the configuration now says ` +
        `${configured.id} (${configured.dimensions} dimensions). Run \`plinth knowledge reembed\` to re-embed everything with the configured ` +
        'embedder, or restore the previous "embeddings" settings.',
    )
    this.name = 'EmbedderMismatchError'
  }
}

/** A `plinth knowledge reembed` was cut short: the stored embeddings are of two sizes. */
export class InterruptedReembedError extends Error {
  readonly code = 'embedder_mismatch'
  constructor(mixed: number, configured: Embedder) {
    super(
      `${mixed} knowledge chunks and memories have embeddings of another size than the configured ${configured.id} ` +
        `(${configured.dimensions} dimensions): a \`plinth knowledge reembed\` was interrupted. Run it again, with ` +
        'the "embeddings" settings you mean to keep, and let it finish; then start the server with those settings.',
    )
    this.name = 'InterruptedReembedError'
  }
}

/**
 * Checks at start that stored embeddings were made by the configured embedder (recording it on a
 * fresh database) and that the HNSW index for its dimension exists. Refuses on a mismatch.
 */
export async function prepareEmbeddings(store: Store, embedder: Embedder): Promise<void> {
  const recorded = await getRagSettings(store)
  if (recorded && recorded.embedder !== embedder.id) {
    // Memories are searched with the same embedder: vectors of another would silently miss.
    if ((await countKnowledgeChunks(store)) > 0 || (await countAllMemories(store)) > 0) {
      // Embeddings of another size than the recorded one: a reembed was cut short (restoring won't do).
      const mixed = await countEmbeddingsNotOf(store, recorded.dimensions)
      if (mixed > 0) throw new InterruptedReembedError(mixed, embedder)
      throw new EmbedderMismatchError(recorded, embedder)
    }
  }
  if (!recorded || recorded.embedder !== embedder.id) await setRagSettings(store, embedder.id, embedder.dimensions)
  // A fresh database holds nothing an older tokenizer indexed.
  if (!recorded) await setRagTokenizer(store, tokenizerVersion)
  try {
    await ensureVectorIndex(store, embedder.dimensions)
  } catch (error) {
    // The index casts every embedding to the configured size: one of another size fails it.
    const mixed = await countEmbeddingsNotOf(store, embedder.dimensions).catch(() => 0)
    if (mixed > 0) throw new InterruptedReembedError(mixed, embedder)
    throw error
  }
}

/**
 * On the embedded database, a warning when the knowledge index has outgrown its buffers: every chunk
 * stored and every search then reads the index from disk (docs/guides/operating.md#storage).
 */
export async function vectorIndexWarning(store: Store): Promise<string | undefined> {
  if (store.engine !== 'pglite') return undefined
  const { indexBytes, bufferBytes } = await vectorIndexFit(store)
  if (indexBytes <= bufferBytes) return undefined
  const mb = (bytes: number): string => `${Math.ceil(bytes / 2 ** 20)} MB`
  return (
    `the knowledge index (${mb(indexBytes)}) is larger than the embedded database's buffers (${mb(bufferBytes)}): ` +
    'storing and searching knowledge read it from disk and are several times slower. Set PLINTH_PGLITE_SHARED_BUFFERS ' +
    `(e.g. ${Math.min(1024, 2 ** Math.ceil(Math.log2((indexBytes * 1.5) / 2 ** 20)))}MB; the server then uses about that much more memory) or use Postgres`
  )
}

/**
 * Re-embeds every chunk, then every memory, with `embedder`, in batches, then records it and rebuilds
 * the index for its dimension. The old index is dropped first (updating an indexed column row by row
 * is slow). `onProgress(done, total)` is called after every batch.
 */
export async function reembedAll(
  store: Store,
  embedder: Embedder,
  onProgress: (done: number, total: number) => void = () => undefined,
): Promise<number> {
  const total = (await countKnowledgeChunks(store)) + (await countAllMemories(store))
  await dropVectorIndexes(store)
  let done = 0
  let after = ''
  onProgress(0, total)
  for (;;) {
    const page = await chunksAfter(store, after, embedder.batchSize * 4)
    if (page.length === 0) break
    const texts = page.map((chunk) => (chunk.heading ? `${chunk.heading}\n${chunk.text}` : chunk.text))
    const vectors: number[][] = []
    for (let start = 0; start < texts.length; start += embedder.batchSize)
      vectors.push(...(await embedder.embed(texts.slice(start, start + embedder.batchSize))))
    await store.transaction((tx) =>
      updateChunkEmbeddings(
        tx,
        page.map((chunk, index) => ({ id: chunk.id, embedding: vectors[index]! })),
      ),
    )
    done += page.length
    after = page.at(-1)!.id
    onProgress(done, total)
  }
  for (let afterMemory = ''; ;) {
    const page = await memoriesAfter(store, afterMemory, embedder.batchSize * 4)
    if (page.length === 0) break
    const vectors: number[][] = []
    for (let start = 0; start < page.length; start += embedder.batchSize)
      vectors.push(
        ...(await embedder.embed(page.slice(start, start + embedder.batchSize).map((memory) => memory.text))),
      )
    await store.transaction((tx) =>
      updateMemoryEmbeddings(
        tx,
        page.map((memory, index) => ({ id: memory.id, embedding: vectors[index]! })),
      ),
    )
    done += page.length
    afterMemory = page.at(-1)!.id
    onProgress(done, total)
  }
  await setRagSettings(store, embedder.id, embedder.dimensions)
  await ensureVectorIndex(store, embedder.dimensions, '256MB')
  return done
}
