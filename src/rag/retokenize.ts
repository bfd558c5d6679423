import {
  chunksAfter,
  getRagSettings,
  memoriesAfter,
  setRagTokenizer,
  updateIndexing,
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
  /** Pages through one table's texts, indexing again those whose tokens changed; how many did. */
  const reindex = async (
    table: 'knowledge_chunks' | 'memories',
    page: (after: string) => Promise<Array<{ id: string; text: string; stored: string }>>,
  ): Promise<number> => {
    let changed = 0
    for (let after = ''; ;) {
      await pause()
      const rows = await page(after)
      if (rows.length === 0) return changed
      after = rows.at(-1)!.id
      const stale = rows.filter((row) => retokenizes(row.text))
      if (stale.length === 0) continue
      const embeddings = hashed ? await embedder.embed(stale.map((row) => row.text)) : undefined
      await pause()
      await store.transaction((tx) =>
        updateIndexing(
          tx,
          table,
          stale.map((row, index) => ({
            id: row.id,
            text: row.stored,
            search: toTsvector(row.text),
            ...(embeddings && { embedding: embeddings[index]! }),
          })),
        ),
      )
      changed += stale.length
    }
  }
  // What the ingestor indexed of a chunk: the chunk with its heading path.
  const chunks = await reindex('knowledge_chunks', async (after) =>
    (await chunksAfter(store, after, pageSize)).map((chunk) => ({
      id: chunk.id,
      text: chunk.heading ? `${chunk.heading}\n${chunk.text}` : chunk.text,
      stored: chunk.text,
    })),
  )
  const memories = await reindex('memories', async (after) =>
    (await memoriesAfter(store, after, pageSize)).map((memory) => ({ ...memory, stored: memory.text })),
  )
  await setRagTokenizer(store, tokenizerVersion)
  return { chunks, memories }
}
