import { createHash } from 'node:crypto'
import {
  commitWorkFiles,
  purgedConversationIds,
  readWorkBlob,
  storeWorkBlob,
  touchWorkBlob,
  workFileManifest,
  workFilesVersion,
  type Store,
  type StoredWorkFile,
  type WorkFileChange,
} from '../store/index.js'

export type { StoredWorkFile, WorkFileChange }

/**
 * Where the files of conversations' work directories are kept for every instance (docs/guides/scaling.md#files).
 * Content is addressed by its SHA-256; a manifest per conversation names a content per path and grows a
 * version with each change. Postgres is the implementation built; an object store (S3-compatible) would
 * implement the same interface.
 */
export interface FileStore {
  readonly kind: 'postgres'
  /** The version of the conversation's files (0: none were ever stored). */
  version(conversationId: string): Promise<number>
  manifest(conversationId: string): Promise<{ version: number; files: StoredWorkFile[] }>
  /**
   * Stores content under its hash unless it is stored already (`bytes` is called only then). False when
   * the bytes read do not have that hash (the file changed since it was hashed): nothing is stored.
   */
  putContent(hash: string, size: number, bytes: () => AsyncIterable<Buffer>): Promise<boolean>
  /** The bytes of stored content. */
  read(hash: string): AsyncIterable<Buffer>
  /**
   * Applies a change to the conversation's manifest, atomically; answers the version before and after.
   * Fails with `ContentMissingError` when content it names was dropped meanwhile (store it again, retry).
   */
  commit(conversationId: string, change: WorkFileChange): Promise<{ previous: number; version: number }>
  /** Of these conversations, those purged or unknown: a cached copy of their files is to go. */
  purged(conversationIds: readonly string[]): Promise<string[]>
}

/** A manifest change named content that is not stored (dropped by a concurrent change): store it again. */
export class ContentMissingError extends Error {
  constructor() {
    super('content named by the change is not stored')
    this.name = 'ContentMissingError'
  }
}

/** The bytes read to store did not have the hash they were stored under (rolled back). */
class ContentChangedError extends Error {}

const chunkBytes = 1024 * 1024

/** Re-cuts a byte stream into chunks of `chunkBytes` (the last one shorter). */
async function* inChunks(source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  let pending: Buffer[] = []
  let length = 0
  for await (const piece of source) {
    pending.push(piece)
    length += piece.length
    while (length >= chunkBytes) {
      const joined = Buffer.concat(pending, length)
      yield joined.subarray(0, chunkBytes)
      pending = [joined.subarray(chunkBytes)]
      length -= chunkBytes
    }
  }
  if (length > 0) yield Buffer.concat(pending, length)
}

/** The files in the database: `work_blobs`, `work_blob_chunks`, `work_files`, `work_manifests` (migration 0036). */
export class PostgresFileStore implements FileStore {
  readonly kind = 'postgres'
  readonly #store: Store

  constructor(store: Store) {
    this.#store = store
  }

  version(conversationId: string): Promise<number> {
    return workFilesVersion(this.#store, conversationId)
  }

  manifest(conversationId: string): Promise<{ version: number; files: StoredWorkFile[] }> {
    return workFileManifest(this.#store, conversationId)
  }

  purged(conversationIds: readonly string[]): Promise<string[]> {
    return purgedConversationIds(this.#store, conversationIds)
  }

  async putContent(hash: string, size: number, bytes: () => AsyncIterable<Buffer>): Promise<boolean> {
    if (await touchWorkBlob(this.#store, hash)) return true
    try {
      await this.#store.transaction(async (tx) => {
        const digest = createHash('sha256')
        let length = 0
        async function* hashed(): AsyncGenerator<Buffer> {
          for await (const chunk of inChunks(bytes())) {
            digest.update(chunk)
            length += chunk.length
            yield chunk
          }
        }
        await storeWorkBlob(tx, hash, size, hashed())
        // Content is addressed by its hash: bytes that changed while being read are never stored under it.
        if (length > 0 && (length !== size || digest.digest('hex') !== hash)) throw new ContentChangedError()
      })
      return true
    } catch (error) {
      if (error instanceof ContentChangedError) return false
      throw error
    }
  }

  read(hash: string): AsyncIterable<Buffer> {
    return readWorkBlob(this.#store, hash)
  }

  async commit(conversationId: string, change: WorkFileChange): Promise<{ previous: number; version: number }> {
    try {
      return await this.#store.transaction((tx) => commitWorkFiles(tx, conversationId, change))
    } catch (error) {
      // 23503: a foreign key — the content was dropped between putContent and this commit.
      if ((error as { code?: string }).code === '23503') throw new ContentMissingError()
      throw error
    }
  }
}
