import type { PluginLogger } from '../extension/index.js'
import {
  claimKnowledgeIngest,
  failKnowledgeIngest,
  finishKnowledgeIngest,
  insertKnowledgeItem,
  pendingKnowledgeItemIds,
  type KnowledgeItem,
  type Executor,
  type NewChunk,
  type Store,
} from '../store/index.js'
import { chunkMarkdown } from './chunker.js'
import { embedAll, EmbeddingError, type Embedder } from './embeddings.js'
import { detectFormat, ExtractError, extractText, mediaTypeOf, type SourceFormat } from './extract.js'
import { cleanText, toTsvector } from './text.js'

export interface IngestorOptions {
  store: Store
  embedder: Embedder | (() => Embedder)
  log: PluginLogger
  /** Texts up to this many characters are ingested within the request (201); larger ones in the background (202). */
  maxSyncChars?: number
  /** How long one instance holds an item it is ingesting before another may take it over. */
  leaseMs?: number
  /** How often pending items are looked for (left by a crash, or by another instance). */
  pollMs?: number
}

export interface NewTextItem {
  projectId: string
  ownerId: string
  title: string
  text: string
  source?: 'text' | 'command'
}

export interface NewFileItem {
  projectId: string
  ownerId: string
  title: string
  filename: string
  format: SourceFormat
  bytes: Uint8Array
}

/** Embedding failures an item survives before it is marked failed (the provider may be down). */
const maxAttempts = 3

/**
 * Turns text and files into searchable chunks. A small text is chunked, embedded and stored within
 * the request. Anything else is stored first (the upload itself, in the database) and ingested by a
 * background queue that claims items with a lease, so an item is never lost: after a crash or
 * restart, or on another instance, pending items whose lease ran out are picked up again.
 */
export class Ingestor {
  readonly #options: Required<Omit<IngestorOptions, 'embedder'>>
  readonly #embedder: () => Embedder
  readonly #queue: string[] = []
  readonly #attempts = new Map<string, number>()
  #running: Promise<void> | null = null
  #timer: NodeJS.Timeout | null = null
  #stopped = false
  #idleWaiters: Array<() => void> = []

  constructor(options: IngestorOptions) {
    this.#options = { maxSyncChars: 64 * 1024, leaseMs: 5 * 60_000, pollMs: 30_000, ...options }
    const embedder = options.embedder
    this.#embedder = typeof embedder === 'function' ? embedder : () => embedder
  }

  /** Picks up what earlier processes left pending, then keeps looking every `pollMs`. */
  async start(): Promise<void> {
    await this.#poll()
    this.#timer = setInterval(() => void this.#poll().catch(() => undefined), this.#options.pollMs)
    this.#timer.unref()
  }

  async stop(): Promise<void> {
    this.#stopped = true
    if (this.#timer) clearInterval(this.#timer)
    await this.#running
  }

  /** Resolves when the queue is empty (tests and the CLI wait on it). */
  async idle(): Promise<void> {
    if (!this.#running && this.#queue.length === 0) return
    await new Promise<void>((resolve) => this.#idleWaiters.push(resolve))
  }

  /**
   * The chunks of a text small enough to ingest within a request; null when it is too large or the
   * embedder did not answer (the item is then ingested in the background).
   */
  async prepareText(text: string): Promise<NewChunk[] | null> {
    const clean = cleanText(text)
    if (clean.length > this.#options.maxSyncChars) return null
    return this.#chunks(clean).catch((error: unknown) => {
      this.#options.log.warn('embedding failed; the item will be ingested in the background', { error: String(error) })
      return null
    })
  }

  /**
   * Stores a text item in the caller's transaction: ready with `chunks` (from prepareText), else
   * pending — then `enqueue` it once the transaction has committed.
   */
  async insertText(tx: Executor, input: NewTextItem, chunks: NewChunk[] | null): Promise<KnowledgeItem> {
    const text = cleanText(input.text)
    const created = await insertKnowledgeItem(tx, {
      projectId: input.projectId,
      ownerId: input.ownerId,
      title: cleanText(input.title),
      source: input.source ?? 'text',
      mediaType: 'text/markdown',
      byteSize: Buffer.byteLength(text),
      body: text,
    })
    return chunks ? ((await finishKnowledgeIngest(tx, created.id, text, chunks)) ?? created) : created
  }

  /** Stores an uploaded file (pending) in the caller's transaction; `enqueue` it after the commit. */
  async insertFile(tx: Executor, input: NewFileItem): Promise<KnowledgeItem> {
    return insertKnowledgeItem(tx, {
      projectId: input.projectId,
      ownerId: input.ownerId,
      title: cleanText(input.title),
      source: 'file',
      filename: cleanText(input.filename),
      mediaType: mediaTypeOf(input.format),
      byteSize: input.bytes.length,
      upload: input.bytes,
    })
  }

  /** Creates a file item in one go; it ingests in the background. */
  async addFile(input: NewFileItem): Promise<KnowledgeItem> {
    const created = await this.#options.store.transaction((tx) => this.insertFile(tx, input))
    this.enqueue(created.id)
    return created
  }

  /** Creates a text item in one go: ready at once when small (and the embedder answers), else pending. */
  async addText(input: NewTextItem): Promise<KnowledgeItem> {
    const chunks = await this.prepareText(input.text)
    const created = await this.#options.store.transaction((tx) => this.insertText(tx, input, chunks))
    if (created.ingestStatus === 'pending') this.enqueue(created.id)
    return created
  }

  enqueue(itemId: string): void {
    if (this.#stopped || this.#queue.includes(itemId)) return
    this.#queue.push(itemId)
    this.#running ??= this.#drain().finally(() => {
      this.#running = null
      if (this.#queue.length > 0 && !this.#stopped) this.enqueue(this.#queue.shift()!)
      else for (const wake of this.#idleWaiters.splice(0)) wake()
    })
  }

  async #poll(): Promise<void> {
    if (this.#stopped) return
    for (const id of await pendingKnowledgeItemIds(this.#options.store.db, 100)) this.enqueue(id)
  }

  async #drain(): Promise<void> {
    for (let id = this.#queue.shift(); id !== undefined && !this.#stopped; id = this.#queue.shift()) {
      await this.#ingest(id).catch((error: unknown) => this.#options.log.error('ingestion failed unexpectedly', { itemId: id, error: String(error) }))
    }
  }

  async #ingest(itemId: string): Promise<void> {
    const { store, log } = this.#options
    const claimed = await claimKnowledgeIngest(store.db, itemId, this.#options.leaseMs)
    if (!claimed) return
    try {
      let text = claimed.body
      if (text === null) {
        const format = detectFormat(claimed.item.filename ?? undefined, claimed.item.mediaType ?? undefined)
        if (!format || !claimed.upload) throw new ExtractError('the upload is missing or of an unsupported type')
        text = await extractText(format, claimed.upload)
      }
      const chunks = await this.#chunks(text)
      await store.transaction((tx) => finishKnowledgeIngest(tx, itemId, text, chunks))
      this.#attempts.delete(itemId)
      log.info('knowledge ingested', { itemId, chunks: chunks.length })
    } catch (error) {
      if (error instanceof EmbeddingError) {
        const attempts = (this.#attempts.get(itemId) ?? 0) + 1
        this.#attempts.set(itemId, attempts)
        if (attempts < maxAttempts) {
          // Left pending: its lease runs out and the poll tries again.
          log.warn('embedding failed; will retry', { itemId, attempts, error: error.message })
          return
        }
      }
      const reason = error instanceof ExtractError || error instanceof EmbeddingError ? error.message : 'an internal error stopped the ingestion'
      if (!(error instanceof ExtractError || error instanceof EmbeddingError)) log.error('ingestion failed', { itemId, error: String(error) })
      this.#attempts.delete(itemId)
      await store.transaction((tx) => failKnowledgeIngest(tx, itemId, reason))
    }
  }

  /** Chunks a text and embeds each chunk (with its heading path, which is part of what it is about). */
  async #chunks(text: string): Promise<NewChunk[]> {
    const embedder = this.#embedder()
    const pieces = chunkMarkdown(text)
    const indexed = pieces.map((piece) => (piece.heading ? `${piece.heading}\n${piece.text}` : piece.text))
    const embeddings = await embedAll(embedder, indexed)
    return pieces.map((piece, index) => ({ seq: piece.seq, heading: piece.heading, text: piece.text, search: toTsvector(indexed[index]!), embedding: embeddings[index]! }))
  }
}
