import {
  chunksAfter,
  getRagSettings,
  memoriesAfter,
  setRagTokenizer,
  updateChunkIndexing,
  updateMemoryIndexing,
  type Store,
} from '../store/index.js'
import { HashingEmbedder, type Embedder } from './embeddings.js'
import { retokenizes, tokenizerVersion, toTsvector } from './text.js'

const pageSize = 256

/**
 * Indexes again the knowledge chunks and memories stored under an older tokenizer whose tokens have
 * changed since (`retokenizes`): their full-text vectors, and their embeddings too when the hashing
 * embedder (which hashes the same tokens) made them. Then records the revision. Idempotent, so an
 * instance stopped halfway, or several instances at once, do no harm. `pause` runs before each
 * statement (the embedded database's turn for requests). Returns what it changed, or undefined when
 * nothing was stored under an older revision.
 */
export async function retokenizeStored(
  store: Store,
  embedder: Embedder,
  pause: () => Promise<void> = async () => undefined,
): Promise<{ chunks: number; memories: number } | undefined> {
  const recorded = await getRagSettings(store)
  if (!recorded || recorded.tokenizer >= tokenizerVersion) return undefined
  const hashed = embedder instanceof HashingEmbedder
  const reindex = async (texts: readonly string[]) => {
    const embeddings = hashed ? await embedder.embed(texts) : undefined
    return texts.map((text, index) => ({ search: toTsvector(text), embedding: embeddings?.[index] }))
  }
  let chunks = 0
  for (let after = ''; ;) {
    await pause()
    const page = await chunksAfter(store, after, pageSize)
    if (page.length === 0) break
    after = page.at(-1)!.id
    // What the ingestor indexed: the chunk with its heading path.
    const changed = page
      .map((chunk) => ({ id: chunk.id, text: chunk.heading ? `${chunk.heading}\n${chunk.text}` : chunk.text }))
      .filter((chunk) => retokenizes(chunk.text))
    if (changed.length === 0) continue
    const indexed = await reindex(changed.map((chunk) => chunk.text))
    await pause()
    await store.transaction((tx) =>
      updateChunkIndexing(
        tx,
        changed.map((chunk, index) => ({ id: chunk.id, ...withEmbedding(indexed[index]!) })),
      ),
    )
    chunks += changed.length
  }
  let memories = 0
  for (let after = ''; ;) {
    await pause()
    const page = await memoriesAfter(store, after, pageSize)
    if (page.length === 0) break
    after = page.at(-1)!.id
    const changed = page.filter((memory) => retokenizes(memory.text))
    if (changed.length === 0) continue
    const indexed = await reindex(changed.map((memory) => memory.text))
    await store.transaction((tx) =>
      updateMemoryIndexing(
        tx,
        changed.map((memory, index) => ({ id: memory.id, ...withEmbedding(indexed[index]!) })),
      ),
    )
    memories += changed.length
  }
  await setRagTokenizer(store, tokenizerVersion)
  return { chunks, memories }
}

function withEmbedding(indexed: { search: string; embedding: number[] | undefined }): {
  search: string
  embedding?: number[]
} {
  return indexed.embedding ? { search: indexed.search, embedding: indexed.embedding } : { search: indexed.search }
}
