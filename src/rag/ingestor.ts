import type { PluginLogger } from '../extension/index.js'
import { createHash, randomUUID } from 'node:crypto'
import { mkdir, open, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setImmediate as nextTurn } from 'node:timers/promises'
import {
  analyzeChunksIfGrown,
  claimKnowledgeIngest,
  completeKnowledgeIngest,
  deleteKnowledgeChunkBatch,
  failKnowledgeIngest,
  finishKnowledgeIngest,
  insertKnowledgeChunkBatch,
  releaseKnowledgeIngest,
  renewKnowledgeLease,
  insertKnowledgeItem,
  pendingKnowledgeItemIds,
  pendingUploadPaths,
  type KnowledgeItem,
  type Executor,
  type NewChunk,
  type Store,
} from '../store/index.js'
import { chunkMarkdown, type TextChunk } from './chunker.js'
import { DocumentExtractor } from './document-extractor.js'
import { embedAll, EmbeddingError, type Embedder } from './embeddings.js'
import { detectFormat, ExtractError, mediaTypeOf, type SourceFormat } from './extract.js'
import { retokenizeStored } from './retokenize.js'
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
  /** Where documents are parsed (a child process with limits); one is made when not given. */
  extractor?: DocumentExtractor
  /** Times an item's ingestion may start (a crash or restart during one counts) before it is failed. */
  maxAttempts?: number
  /**
   * Where uploaded files wait for ingestion, on disk (given on the embedded database, which would keep
   * their bytes in memory); without it they wait in the database (`upload`).
   */
  uploadDir?: string
  /**
   * Chunks embedded at once and stored per statement at most; the event loop turns between batches.
   * The embedded database runs each statement on the server's own thread, so its batches are small
   * (default 8, else 64).
   */
  batchSize?: number
  /**
   * How long one statement storing chunks should hold the database, ms (0: no bound). On the embedded
   * database (default 20 there) a statement holds the server's only thread, and an index that has
   * outgrown its buffers makes each chunk slow to insert, so the statements get fewer chunks.
   */
  statementMs?: number
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
  /** The file: its bytes, or an upload `stageUpload` wrote to disk. */
  bytes?: Uint8Array
  staged?: StagedUpload
}

/** An upload streamed to disk, waiting to become an item (`insertFile`) or to be discarded. */
export interface StagedUpload {
  path: string
  size: number
  sha256: string
}

/** An upload past its size limit (HTTP 413). */
export class UploadTooLargeError extends Error {
  constructor(limit: number) {
    super(`the file is larger than ${limit} bytes`)
    this.name = 'UploadTooLargeError'
  }
}

/**
 * Turns text and files into searchable chunks. A small text is chunked, embedded and stored within
 * the request. Anything else is stored first (the upload itself, in the database) and ingested by a
 * background queue that claims items with a lease, so an item is never lost: after a crash or
 * restart, or on another instance, pending items whose lease ran out are picked up again.
 */
export class Ingestor {
  readonly #options: Required<Omit<IngestorOptions, 'embedder' | 'extractor' | 'uploadDir'>>
  readonly #embedder: () => Embedder
  readonly #extractor: DocumentExtractor
  readonly #uploadDir: string | null
  readonly #queue: string[] = []
  #running: Promise<void> | null = null
  #timer: NodeJS.Timeout | null = null
  #stopped = false
  #idleWaiters: Array<() => void> = []
  #retokenizing: Promise<void> | null = null

  constructor(options: IngestorOptions) {
    const { extractor, uploadDir, ...rest } = options
    this.#options = {
      maxSyncChars: 64 * 1024,
      leaseMs: 5 * 60_000,
      pollMs: 30_000,
      maxAttempts: 3,
      batchSize: options.store.engine === 'pglite' ? 8 : 64,
      statementMs: options.store.engine === 'pglite' ? 20 : 0,
      ...rest,
    }
    this.#uploadDir = uploadDir ?? null
    this.#extractor = extractor ?? new DocumentExtractor()
    const embedder = options.embedder
    this.#embedder = typeof embedder === 'function' ? embedder : () => embedder
  }

  /** Picks up what earlier processes left pending, then keeps looking every `pollMs`. */
  async start(): Promise<void> {
    await this.#sweepUploads().catch((error: unknown) =>
      this.#options.log.warn('could not tidy the uploads directory', { err: error }),
    )
    await this.#poll()
    this.#timer = setInterval(() => void this.#poll().catch(() => undefined), this.#options.pollMs)
    this.#timer.unref()
    // Knowledge stored before statistics were kept up (or by a process that stopped): not awaited.
    void this.#refreshStatistics()
    // Texts an older tokenizer indexed: searchable as before meanwhile, so not awaited either.
    this.#retokenizing = this.#retokenize()
  }

  async #retokenize(): Promise<void> {
    const { store, log } = this.#options
    try {
      const done = await retokenizeStored(store, this.#embedder(), async () => {
        if (this.#stopped) throw new Error('stopping')
        await store.quiet(100)
      })
      if (done) log.info('knowledge and memories indexed with the current tokenizer', done)
    } catch (error) {
      if (!this.#stopped) log.warn('could not index knowledge again with the current tokenizer', { err: error })
    }
  }

  /** On the embedded database (no autovacuum), the chunks' planner statistics once they have grown. */
  async #refreshStatistics(): Promise<void> {
    const { store, log } = this.#options
    if (store.engine !== 'pglite' || this.#stopped) return
    try {
      if (await analyzeChunksIfGrown(store)) log.info('knowledge statistics refreshed')
    } catch (error) {
      log.warn('could not refresh the knowledge statistics', { err: error })
    }
  }

  /** Stops at the next batch; an item cut short is given back (its lease let go, the attempt uncounted). */
  async stop(): Promise<void> {
    this.#stopped = true
    if (this.#timer) clearInterval(this.#timer)
    // The parser's process first: a long parse would otherwise hold the stop up.
    await this.#extractor.stop()
    await this.#running
    await this.#retokenizing
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
  /**
   * The text of a document given with a message (docs/guides/agent-runs.md#files-in-messages), parsed in
   * the same sandboxed child as knowledge uploads; null for a type it cannot read, an ExtractError when
   * the document breaks a limit or cannot be parsed.
   */
  async extractDocument(filename: string, bytes: Uint8Array): Promise<string | null> {
    const format = detectFormat(filename, undefined)
    if (!format) return null
    return (await this.#extractor.extract({ format, bytes })).text
  }

  async prepareText(text: string): Promise<NewChunk[] | null> {
    const clean = cleanText(text)
    if (clean.length > this.#options.maxSyncChars) return null
    return this.#chunks(clean).catch((error: unknown) => {
      this.#options.log.warn('embedding failed; the item will be ingested in the background', { err: error })
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

  /**
   * Streams an upload to disk (never whole in memory), hashing it: refused with UploadTooLargeError past
   * `maxBytes`, leaving nothing behind. Make it an item with `insertFile`, or `discard` it.
   */
  async stageUpload(source: AsyncIterable<Buffer>, maxBytes: number): Promise<StagedUpload> {
    const dir = this.#uploadDir ?? tmpdir()
    await mkdir(dir, { recursive: true, mode: 0o700 })
    const path = join(dir, `.staging-${randomUUID()}`)
    const hash = createHash('sha256')
    let size = 0
    const handle = await open(path, 'wx', 0o600)
    try {
      for await (const chunk of source) {
        size += chunk.length
        if (size > maxBytes) throw new UploadTooLargeError(maxBytes)
        hash.update(chunk)
        await handle.write(chunk)
      }
    } catch (error) {
      await handle.close()
      await rm(path, { force: true })
      throw error
    }
    await handle.close()
    return { path, size, sha256: hash.digest('hex') }
  }

  /** Removes a staged upload that did not become an item. */
  async discard(staged: StagedUpload): Promise<void> {
    await rm(staged.path, { force: true })
  }

  /**
   * Stores an uploaded file (pending) in the caller's transaction; `enqueue` it after the commit. With an
   * uploads directory the file waits there (a staged upload is moved in); otherwise its bytes go to the
   * database and a staged upload is left for the caller to `discard`.
   */
  async insertFile(tx: Executor, input: NewFileItem): Promise<KnowledgeItem> {
    const byteSize = input.staged?.size ?? input.bytes?.length ?? 0
    let uploadPath: string | null = null
    let upload: Uint8Array | null = null
    if (this.#uploadDir) {
      uploadPath = join(this.#uploadDir, randomUUID())
      await mkdir(this.#uploadDir, { recursive: true, mode: 0o700 })
      if (input.staged) await rename(input.staged.path, uploadPath)
      else await writeFile(uploadPath, input.bytes ?? new Uint8Array(), { mode: 0o600 })
    } else {
      upload = input.bytes ?? (input.staged ? await readFile(input.staged.path) : new Uint8Array())
    }
    return insertKnowledgeItem(tx, {
      projectId: input.projectId,
      ownerId: input.ownerId,
      title: cleanText(input.title),
      source: 'file',
      filename: cleanText(input.filename),
      mediaType: mediaTypeOf(input.format),
      byteSize,
      upload,
      uploadPath,
    })
  }

  /** Creates a file item in one go; it ingests in the background. */
  async addFile(input: NewFileItem): Promise<KnowledgeItem> {
    const created = await this.#options.store.transaction((tx) => this.insertFile(tx, input))
    this.enqueue(created.id)
    return created
  }

  /** Removes files of the uploads directory no pending item names (left by a crash or a deleted item). */
  async #sweepUploads(): Promise<void> {
    if (!this.#uploadDir) return
    const names = await readdir(this.#uploadDir).catch(() => [] as string[])
    if (names.length === 0) return
    const pending = await pendingUploadPaths(this.#options.store)
    for (const name of names) {
      const path = join(this.#uploadDir, name)
      if (!pending.has(path)) await rm(path, { force: true })
    }
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
    for (const id of await pendingKnowledgeItemIds(this.#options.store, 100)) this.enqueue(id)
  }

  async #drain(): Promise<void> {
    for (let id = this.#queue.shift(); id !== undefined && !this.#stopped; id = this.#queue.shift()) {
      await this.#ingest(id).catch((error: unknown) =>
        this.#options.log.error('ingestion failed unexpectedly', { itemId: id, err: error }),
      )
    }
  }

  /**
   * Ingests one item (docs/security.md, "untrusted documents"): claim it (counting the attempt), parse
   * and chunk it in the extractor's child process, then embed and store its chunks a batch at a time —
   * each batch one fenced statement, the event loop turning between batches — and mark it ready. A
   * document the parser refuses or cannot survive fails with the reason; an item whose attempts keep
   * being interrupted fails after `maxAttempts`; an embedder that is down leaves it pending for the
   * next poll (that attempt counts too).
   */
  async #ingest(itemId: string): Promise<void> {
    const { store, log, maxAttempts, leaseMs } = this.#options
    const claimed = await claimKnowledgeIngest(store, itemId, leaseMs)
    if (!claimed) return
    const { attempt } = claimed
    try {
      await this.#removeChunks(itemId)
      if (attempt > maxAttempts)
        throw new ExtractError(
          `ingestion was started ${maxAttempts} times and never finished (the server stopped or the embedder failed each time)`,
        )
      let extracted: { text: string; pieces: TextChunk[] }
      if (claimed.body !== null) {
        extracted = await this.#extractor.extract({ format: null, text: claimed.body })
      } else {
        const format = detectFormat(claimed.item.filename ?? undefined, claimed.item.mediaType ?? undefined)
        if (!format || (!claimed.upload && !claimed.uploadPath))
          throw new ExtractError('the upload is missing or of an unsupported type')
        // A file on disk is read by the parser's process, not this one.
        extracted = await this.#extractor.extract(
          claimed.uploadPath ? { format, path: claimed.uploadPath } : { format, bytes: claimed.upload },
        )
      }
      let stored = 0
      let lastRenewal = Date.now()
      const { batchSize, statementMs } = this.#options
      // Bounded: one chunk first, then as many as fit the time the last ones took.
      let perStatement = statementMs > 0 ? 1 : batchSize
      let lastMs = 0
      for (let start = 0; start < extracted.pieces.length; start += batchSize) {
        if (this.#stopped) return await this.#release(itemId, attempt)
        const chunks = await this.#embed(extracted.pieces.slice(start, start + batchSize))
        for (let at = 0; at < chunks.length;) {
          // Requests first: a statement of theirs waits for at most the one in flight. Under
          // continuous load this one waits at most twice as long as the last took (a third of the time).
          await store.quiet(Math.max(100, 2 * lastMs))
          if (this.#stopped) return await this.#release(itemId, attempt)
          const part = chunks.slice(at, at + perStatement)
          const began = performance.now()
          const written = await insertKnowledgeChunkBatch(store, itemId, attempt, part)
          if (written === 0) return // deleted, or no longer ours
          lastMs = performance.now() - began
          if (statementMs > 0)
            perStatement = Math.max(
              1,
              Math.min(batchSize, Math.floor((statementMs * part.length) / Math.max(lastMs, 1))),
            )
          at += part.length
          stored += written
        }
        if (Date.now() - lastRenewal > leaseMs / 4) {
          if (!(await renewKnowledgeLease(store, itemId, attempt, leaseMs))) return
          lastRenewal = Date.now()
        }
        // Let requests (and, on the embedded database, their queries) through between batches.
        await nextTurn()
      }
      const ready = await store.transaction((tx) =>
        completeKnowledgeIngest(tx, itemId, attempt, extracted.text, stored),
      )
      if (ready) log.info('knowledge ingested', { itemId, chunks: stored })
      if (ready) await this.#refreshStatistics()
      if (ready && claimed.uploadPath) await rm(claimed.uploadPath, { force: true })
    } catch (error) {
      // Cut short by a graceful stop (the parser's process is stopped with the server): not the item's fault.
      if (this.#stopped) return await this.#release(itemId, attempt)
      if (error instanceof EmbeddingError && attempt < maxAttempts) {
        // Left pending: its lease runs out and the poll tries again.
        log.warn('embedding failed; will retry', { itemId, attempt, err: error })
        return
      }
      const reason =
        error instanceof ExtractError || error instanceof EmbeddingError
          ? error.message
          : 'an internal error stopped the ingestion'
      if (!(error instanceof ExtractError || error instanceof EmbeddingError))
        log.error('ingestion failed', { itemId, err: error })
      await this.#removeChunks(itemId).catch(() => undefined)
      const failed = await store.transaction((tx) => failKnowledgeIngest(tx, itemId, reason))
      if (failed && claimed.uploadPath) await rm(claimed.uploadPath, { force: true })
    }
  }

  async #release(itemId: string, attempt: number): Promise<void> {
    await releaseKnowledgeIngest(this.#options.store, itemId, attempt).catch((error: unknown) =>
      this.#options.log.warn('could not give back an item whose ingestion the stop cut short', { itemId, err: error }),
    )
  }

  /** Removes what an earlier attempt stored, in bounded statements. */
  async #removeChunks(itemId: string): Promise<void> {
    while ((await deleteKnowledgeChunkBatch(this.#options.store, itemId, 256)) > 0) await nextTurn()
  }

  /** Embeds chunks (with their heading path, which is part of what they are about). */
  async #embed(pieces: readonly TextChunk[]): Promise<NewChunk[]> {
    const indexed = pieces.map((piece) => (piece.heading ? `${piece.heading}\n${piece.text}` : piece.text))
    const embeddings = await embedAll(this.#embedder(), indexed)
    return pieces.map((piece, index) => ({
      seq: piece.seq,
      heading: piece.heading,
      text: piece.text,
      search: toTsvector(indexed[index]!),
      embedding: embeddings[index]!,
    }))
  }

  /** Chunks a small text and embeds each chunk (the in-request path). */
  async #chunks(text: string): Promise<NewChunk[]> {
    return this.#embed(chunkMarkdown(text))
  }
}
