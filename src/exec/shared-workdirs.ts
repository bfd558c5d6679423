import { createHash } from 'node:crypto'
import { readdir } from 'node:fs/promises'
import { Readable } from 'node:stream'
import type { PluginLogger } from '../extension/index.js'
import { ContentMissingError, type FileStore, type StoredWorkFile } from './file-store.js'
import { PathError, WorkDirectories, type FileEntry, type OpenedFile } from './workdirs.js'

/** What this instance last synced of one file: its content and the local copy's size and time. */
interface CachedFile {
  hash: string
  size: number
  mtimeMs: number
}

/** This instance's copy of a conversation's files: the manifest version it matches (-1: unknown). */
interface CacheState {
  version: number
  files: Map<string, CachedFile>
}

/** Files listed at most when syncing one directory. */
const maxScanned = 200_000

/**
 * Work directories whose files every instance shares (docs/guides/scaling.md#files). The local
 * directory is this instance's cache of the conversation's files in a `FileStore`: before a read, a
 * listing or an execution it is brought up to date (one version lookup when nothing changed; otherwise
 * only what differs, by hash, is fetched and what is gone is removed), and after a server write, a
 * delete or an execution what changed is stored (content first, then the manifest in one transaction).
 * Only regular files are shared: symlinks and special files a program made stay in this copy, as the
 * local operations refuse to follow them anyway. The local operations themselves are the base class's.
 */
export class SharedWorkDirectories extends WorkDirectories {
  readonly files: FileStore
  readonly #log: PluginLogger
  readonly #state = new Map<string, CacheState>()
  readonly #locks = new Map<string, Promise<unknown>>()
  /** Executions running here per conversation: a sync then never removes what they may be writing. */
  readonly #executing = new Map<string, number>()

  constructor(root: string, files: FileStore, log: PluginLogger, options: { deniedSegments?: readonly string[] } = {}) {
    super(root, options)
    this.files = files
    this.#log = log
  }

  /** Runs `fn` after every earlier sync of the conversation on this instance. */
  #exclusive<T>(conversationId: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.#locks.get(conversationId) ?? Promise.resolve()
    const next = previous.then(fn, fn)
    const settled = next.catch(() => undefined)
    this.#locks.set(conversationId, settled)
    void settled.then(() => {
      if (this.#locks.get(conversationId) === settled) this.#locks.delete(conversationId)
    })
    return next
  }

  /**
   * Removes the copies of conversations retention purged (on whichever instance swept) or that this
   * database does not know: a purge must not leave their files on the other instances' disks.
   */
  override async evictPurged(): Promise<number> {
    const names = await readdir(this.root).catch(() => [] as string[])
    const ids = names.filter((name) => /^[0-9A-Za-z]{1,64}$/.test(name))
    let evicted = 0
    for (let start = 0; start < ids.length; start += 500) {
      for (const id of await this.files.purged(ids.slice(start, start + 500))) {
        await this.#exclusive(id, async () => {
          this.#state.delete(id)
          await this.discard(id)
        })
        evicted++
      }
    }
    return evicted
  }

  override pull(conversationId: string): Promise<void> {
    return this.#exclusive(conversationId, () => this.#pull(conversationId))
  }

  override async open(conversationId: string, path: string): Promise<OpenedFile> {
    await this.pull(conversationId)
    return super.open(conversationId, path)
  }

  override async read(
    conversationId: string,
    path: string,
    options: { offset?: number; limit: number },
  ): Promise<{ bytes: Buffer; size: number }> {
    await this.pull(conversationId)
    return super.read(conversationId, path, options)
  }

  /** From the synced copy: a replacement's quota counts the stored file, whichever instance wrote it. */
  override async fileSize(conversationId: string, path: string): Promise<number | null> {
    await this.pull(conversationId)
    return super.fileSize(conversationId, path)
  }

  override async list(conversationId: string, path = '', max = 10_000): Promise<FileEntry[]> {
    await this.pull(conversationId)
    return super.list(conversationId, path, max)
  }

  override write(
    conversationId: string,
    path: string,
    content: Buffer | string | Readable,
    options: { maxBytes?: number } = {},
  ): Promise<{ path: string; size: number; replaced: number | null }> {
    return this.#exclusive(conversationId, async () => {
      await this.#pull(conversationId)
      const written = await super.write(conversationId, path, content, options)
      await this.#push(conversationId, { only: [written.path] })
      return written
    })
  }

  override remove(conversationId: string, path: string): Promise<{ bytes: number; files: number }> {
    return this.#exclusive(conversationId, async () => {
      await this.#pull(conversationId)
      const removed = await super.remove(conversationId, path)
      const state = this.#stateOf(conversationId)
      const prefix = this.segments(path).join('/')
      await this.#commit(conversationId, state, [], [prefix])
      return removed
    })
  }

  override async discard(conversationId: string): Promise<void> {
    await super.discard(conversationId)
    this.#state.delete(conversationId)
  }

  override async beforeExec(conversationId: string): Promise<void> {
    await this.pull(conversationId)
    this.#executing.set(conversationId, (this.#executing.get(conversationId) ?? 0) + 1)
  }

  override async afterExec(conversationId: string, startedAt: number): Promise<void> {
    const running = (this.#executing.get(conversationId) ?? 1) - 1
    if (running > 0) this.#executing.set(conversationId, running)
    else this.#executing.delete(conversationId)
    await this.#exclusive(conversationId, () => this.#push(conversationId, { since: startedAt }))
  }

  #stateOf(conversationId: string): CacheState {
    let state = this.#state.get(conversationId)
    if (!state) {
      state = { version: -1, files: new Map() }
      this.#state.set(conversationId, state)
    }
    return state
  }

  /** The regular files of the local copy: path → size and modification time. */
  async #scan(conversationId: string): Promise<Map<string, { size: number; mtimeMs: number }>> {
    const entries = await super.list(conversationId, '', maxScanned)
    return new Map(
      entries
        .filter((entry) => entry.type === 'file')
        .map((entry) => [entry.path, { size: entry.size, mtimeMs: Date.parse(entry.modifiedAt) }]),
    )
  }

  /** Size and time of some paths of the local copy (regular files only). */
  async #entries(
    conversationId: string,
    paths: readonly string[],
  ): Promise<Map<string, { size: number; mtimeMs: number }>> {
    const found = new Map<string, { size: number; mtimeMs: number }>()
    for (const path of paths) {
      const entry = await super.entry(conversationId, path)
      if (entry?.type === 'file') found.set(entry.path, { size: entry.size, mtimeMs: Date.parse(entry.modifiedAt) })
    }
    return found
  }

  /** The local copy's bytes of one file. */
  async *#localBytes(conversationId: string, path: string): AsyncGenerator<Buffer> {
    const { handle } = await super.open(conversationId, path)
    try {
      for await (const chunk of handle.createReadStream({ autoClose: false, highWaterMark: 256 * 1024 }))
        yield chunk as Buffer
    } finally {
      await handle.close()
    }
  }

  async #hashLocal(conversationId: string, path: string): Promise<string | null> {
    const hash = createHash('sha256')
    try {
      for await (const chunk of this.#localBytes(conversationId, path)) hash.update(chunk)
    } catch (error) {
      // Gone or swapped for something else meanwhile: not a file to share.
      if (error instanceof PathError) return null
      throw error
    }
    return hash.digest('hex')
  }

  /** Makes the local copy match the stored files (see the class comment). */
  async #pull(conversationId: string): Promise<void> {
    const version = await this.files.version(conversationId)
    const state = this.#state.get(conversationId)
    if (state && state.version === version) return
    if (version === 0 && !state) {
      // Never stored: files this directory holds from before it was shared are stored now.
      this.#state.set(conversationId, { version: 0, files: new Map() })
      await this.#push(conversationId, {})
      return
    }
    const manifest = await this.files.manifest(conversationId)
    const local = await this.#scan(conversationId)
    const known = state?.files ?? new Map<string, CachedFile>()
    const next = new Map<string, CachedFile>()
    const fetched: StoredWorkFile[] = []
    for (const file of manifest.files) {
      const here = local.get(file.path)
      const cached = known.get(file.path)
      if (here && here.size === file.size) {
        if (cached && cached.hash === file.hash && cached.mtimeMs === here.mtimeMs) {
          next.set(file.path, cached)
          continue
        }
        if ((await this.#hashLocal(conversationId, file.path)) === file.hash) {
          next.set(file.path, { hash: file.hash, size: file.size, mtimeMs: here.mtimeMs })
          continue
        }
      }
      await this.#fetch(conversationId, file)
      fetched.push(file)
    }
    if (fetched.length > 0) {
      const times = await this.#scan(conversationId)
      for (const file of fetched)
        next.set(file.path, { hash: file.hash, size: file.size, mtimeMs: times.get(file.path)?.mtimeMs ?? 0 })
    }
    if (!this.#executing.has(conversationId)) {
      // What is here and no longer stored was deleted elsewhere (or never stored: a crash before a sync).
      const emptied = new Set<string>()
      for (const path of local.keys()) {
        if (next.has(path)) continue
        await super.removeFile(conversationId, path.split('/'))
        const parts = path.split('/')
        for (let depth = parts.length - 1; depth > 0; depth--) emptied.add(parts.slice(0, depth).join('/'))
      }
      // Directories are not stored: those the deletions left empty go too, deepest first.
      for (const dir of [...emptied].sort((x, y) => y.split('/').length - x.split('/').length)) {
        const inside = await super.list(conversationId, dir, 1).catch(() => null)
        if (inside && inside.length === 0) await super.remove(conversationId, dir).catch(() => undefined)
      }
    }
    this.#state.set(conversationId, { version: manifest.version, files: next })
  }

  /** Writes one stored file into the local copy. */
  async #fetch(conversationId: string, file: StoredWorkFile): Promise<void> {
    // With the time it was written where it was written: every instance lists the same `modifiedAt`.
    const write = () =>
      super.write(conversationId, file.path, Readable.from(this.files.read(file.hash)), {
        ...(file.modifiedAt !== undefined && { mtimeMs: file.modifiedAt }),
      })
    await write().catch(async (error: unknown) => {
      // A directory here where another instance has a file: the stored files win.
      if (!(error instanceof PathError) || error.code !== 'is_directory') throw error
      await super.remove(conversationId, file.path)
      await write()
    })
  }

  /**
   * Stores what changed in the local copy: `only` these paths (a server write), or every file — those
   * modified since `since` (an execution's start) are hashed whatever their size and time say.
   */
  async #push(conversationId: string, options: { only?: string[]; since?: number }): Promise<void> {
    const state = this.#stateOf(conversationId)
    const local = options.only ? await this.#entries(conversationId, options.only) : await this.#scan(conversationId)
    const put: StoredWorkFile[] = []
    const paths = options.only ?? [...local.keys()]
    for (const path of paths) {
      const here = local.get(path)
      if (!here) continue
      const cached = state.files.get(path)
      const recent = options.only !== undefined || options.since === undefined || here.mtimeMs >= options.since - 2000
      if (cached && !recent && cached.size === here.size && cached.mtimeMs === here.mtimeMs) continue
      const hash = await this.#hashLocal(conversationId, path)
      if (hash === null) continue
      if (cached?.hash === hash) {
        cached.mtimeMs = here.mtimeMs
        continue
      }
      put.push({ path, hash, size: here.size, modifiedAt: here.mtimeMs })
    }
    const remove = options.only ? [] : [...state.files.keys()].filter((path) => !local.has(path))
    if (put.length === 0 && remove.length === 0) return
    await this.#commit(conversationId, state, put, remove, local)
  }

  /** Stores the content of `put`, then applies the manifest change, and records it in `state`. */
  async #commit(
    conversationId: string,
    state: CacheState,
    put: StoredWorkFile[],
    remove: string[],
    local?: Map<string, { size: number; mtimeMs: number }>,
  ): Promise<void> {
    const store = async (): Promise<void> => {
      for (const file of [...put]) {
        if (await this.files.putContent(file.hash, file.size, () => this.#localBytes(conversationId, file.path)))
          continue
        // Changed while it was read (a program still writing it): left for the next sync.
        put.splice(put.indexOf(file), 1)
      }
    }
    await store()
    let result: { previous: number; version: number }
    try {
      result = await this.files.commit(conversationId, { put, remove })
    } catch (error) {
      if (!(error instanceof ContentMissingError)) throw error
      this.#log.debug('work files: content dropped by a concurrent change; storing it again', { conversationId })
      await store()
      result = await this.files.commit(conversationId, { put, remove })
    }
    const times = local ?? new Map<string, { mtimeMs: number }>()
    for (const path of remove) {
      for (const known of [...state.files.keys()]) {
        if (path === '' || known === path || known.startsWith(`${path}/`)) state.files.delete(known)
      }
    }
    for (const file of put)
      state.files.set(file.path, { hash: file.hash, size: file.size, mtimeMs: times.get(file.path)?.mtimeMs ?? 0 })
    // Another change landed between this copy's version and ours: the next pull compares everything.
    state.version = result.previous === state.version ? result.version : -1
  }
}
