import { randomUUID } from 'node:crypto'
import type { Stats } from 'node:fs'
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises'
import type { FileHandle } from 'node:fs/promises'
import { Readable } from 'node:stream'
import { join } from 'node:path'
import { DirectoryHandle } from './directory-handle.js'

/** A path a client or the model may not use; `code` picks the HTTP answer. */
export class PathError extends Error {
  readonly code: 'invalid_path' | 'not_found' | 'is_directory' | 'too_large'
  constructor(code: PathError['code'], message: string) {
    super(message)
    this.name = 'PathError'
    this.code = code
  }
}

export interface FileEntry {
  path: string
  type: 'file' | 'directory' | 'symlink' | 'other'
  size: number
  modifiedAt: string
}

/** Who owns what the server creates in a work directory: the sandbox user, when there is one. */
export interface WorkOwner {
  uid: number
  gid: number
}

/** A file opened for reading: read or stream through `handle`, then close it. */
export interface OpenedFile {
  handle: FileHandle
  size: number
}

export const defaultDeniedSegments = [
  '.ssh',
  '.aws',
  '.gnupg',
  '.netrc',
  '.git-credentials',
  '.docker',
  '.kube',
  '.config/gcloud',
]

export const maxWorkDepth = 32
const maxDepth = maxWorkDepth
// C0 controls (NUL is refused for every path), DEL and C1 controls.
// eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
const controlCharacter = /[\u0001-\u001f\u007f-\u009f]/
/** What `write` names the file it stages an upload in. */
const stagingName = /^\.plinth-upload-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/** What a name is, from its own (not followed) status. */
function entryType(entry: Stats): FileEntry['type'] {
  return entry.isSymbolicLink() ? 'symlink' : entry.isDirectory() ? 'directory' : entry.isFile() ? 'file' : 'other'
}

/** The errno of a failed system call, as the PathError a caller answers with. */
function pathFailure(error: unknown, path: string): PathError {
  const code = (error as NodeJS.ErrnoException).code
  if (code === 'ENOENT') return new PathError('not_found', `${path || '.'} does not exist`)
  if (code === 'ELOOP' || code === 'ENOTDIR' || code === 'EMLINK')
    return new PathError(
      'invalid_path',
      `${path}: a part of the path is a symlink or not a directory (symlinks are never followed, so none leads outside the work directory)`,
    )
  if (code === 'EISDIR') return new PathError('is_directory', `${path} is a directory`)
  if (code === 'ENXIO' || code === 'ETXTBSY') return new PathError('invalid_path', `${path} is not a regular file`)
  if (error instanceof PathError) return error
  return new PathError('invalid_path', `${path} cannot be used (${code ?? (error as Error).message})`)
}

/**
 * One directory per conversation under `root`, and the only way the server touches files in it
 * (docs/security.md, "work directories"). Paths are relative, without `..` and without sensitive
 * segments (`.ssh`, …). The directory is writable by sandboxed programs, which run while the server
 * works in it, so nothing here acts by path: every operation walks from the conversation's directory
 * one component at a time through open directory descriptors, never follows a symlink, and reads and
 * writes through the descriptor it opened (see `DirectoryHandle`). What the server creates belongs to
 * the sandbox user from the start; nothing is chowned recursively by path.
 */
export class WorkDirectories {
  readonly root: string
  readonly #denied: string[]
  #owner: WorkOwner | null = null
  #rootReady = false
  /** Staging files of uploads in flight in this process (`write`). */
  readonly #staging = new Set<string>()
  /**
   * The server's own recent writes per conversation (path → the file's inode change time then), so that
   * an execution's measure does not take a file uploaded just before it for one the program wrote.
   */
  readonly #serverWrites = new Map<string, Map<string, { ctimeMs: number; at: number }>>()

  constructor(root: string, options: { deniedSegments?: readonly string[] } = {}) {
    this.root = root
    this.#denied = (options.deniedSegments ?? defaultDeniedSegments).map((segment) => segment.toLowerCase())
  }

  /** Who owns what the server creates from now on (the sandbox user; null: the server's own user). */
  setOwner(owner: WorkOwner | null): void {
    this.#owner = owner
  }

  get owner(): WorkOwner | null {
    return this.#owner
  }

  /**
   * The conversation's directory (created on first use). The root is traversable but not listable
   * (0711), so a sandbox user can reach its own directory by path and no other; each directory is
   * 0700 and belongs to the sandbox user.
   */
  async dir(conversationId: string): Promise<string> {
    if (!/^[0-9A-Za-z]{1,64}$/.test(conversationId)) throw new PathError('invalid_path', 'bad conversation id')
    await this.#ensureRoot()
    const dir = join(this.root, conversationId)
    const created = await mkdir(dir, { mode: 0o700 }).then(
      () => true,
      (error: NodeJS.ErrnoException) => {
        if (error.code !== 'EEXIST') throw error
        return false
      },
    )
    if (created && this.#owner) {
      const handle = await DirectoryHandle.openTrusted(dir)
      await handle.chown(this.#owner.uid, this.#owner.gid).finally(() => handle.close())
    }
    return dir
  }

  /**
   * A new empty directory for a sandboxed program that belongs to no conversation (the listing process of
   * a sandboxed MCP server), owned like a work directory. Its name (`.scratch-…`) is no conversation id,
   * so no route reaches it; the caller removes it.
   */
  async scratch(): Promise<string> {
    await this.#ensureRoot()
    const dir = await mkdtemp(join(this.root, '.scratch-'))
    if (this.#owner) {
      const handle = await DirectoryHandle.openTrusted(dir)
      await handle.chown(this.#owner.uid, this.#owner.gid).finally(() => handle.close())
    }
    return dir
  }

  async #ensureRoot(): Promise<void> {
    if (this.#rootReady) return
    await mkdir(this.root, { recursive: true })
    await chmod(this.root, 0o711)
    this.#rootReady = true
  }

  /**
   * Brings the conversation's directory up to date with the files every instance sees (a shared
   * FileStore, `SharedWorkDirectories`); here, where the directory is the only copy, nothing to do.
   */
  async pull(_conversationId: string): Promise<void> {}

  /** An execution is about to run in the conversation's directory. */
  async beforeExec(_conversationId: string): Promise<void> {}

  /** An execution that started at `startedAt` (ms since the epoch) ended: what it changed is kept. */
  async afterExec(_conversationId: string, _startedAt: number): Promise<void> {}

  /** The relative path's segments, or a PathError saying what is wrong with it. */
  segments(path: string): string[] {
    if (path.includes('\0')) throw new PathError('invalid_path', 'the path contains a NUL character')
    if (path.startsWith('/') || /^[A-Za-z]:[\\/]/.test(path))
      throw new PathError('invalid_path', 'the path must be relative to the work directory')
    if (path.length > 1024) throw new PathError('invalid_path', 'the path is longer than 1024 characters')
    const parts = path.split('/').filter((part) => part !== '' && part !== '.')
    if (parts.includes('..')) throw new PathError('invalid_path', 'the path must not contain ..')
    if (parts.length > maxDepth) throw new PathError('invalid_path', `the path is deeper than ${maxDepth} directories`)
    for (const denied of this.#denied) {
      const deniedParts = denied.split('/')
      for (let index = 0; index + deniedParts.length <= parts.length; index++) {
        if (deniedParts.every((part, offset) => parts[index + offset]!.toLowerCase() === part)) {
          throw new PathError('invalid_path', `the path must not go through ${denied}`)
        }
      }
    }
    return parts
  }

  /** Opens the conversation's directory, then each directory of `parts` in turn (made when `create`). */
  async #walk(
    conversationId: string,
    parts: readonly string[],
    path: string,
    create: boolean,
  ): Promise<DirectoryHandle> {
    let current = await DirectoryHandle.openTrusted(await this.dir(conversationId))
    try {
      for (const part of parts) {
        let next: DirectoryHandle
        try {
          next = await current.openDirectory(part)
        } catch (error) {
          if (!create || (error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
          const made = await current.makeDirectory(part, 0o700).then(
            () => true,
            (mkdirError: NodeJS.ErrnoException) => {
              if (mkdirError.code !== 'EEXIST') throw mkdirError
              return false
            },
          )
          next = await current.openDirectory(part)
          // Through the descriptor just opened: the directory made, or whatever replaced it (never a link).
          if (made && this.#owner) await next.chown(this.#owner.uid, this.#owner.gid)
        }
        await current.close()
        current = next
      }
      return current
    } catch (error) {
      await current.close()
      throw pathFailure(error, path)
    }
  }

  /** Opens a regular file for reading (a directory, FIFO, device or symlink is refused). */
  async open(conversationId: string, path: string): Promise<OpenedFile> {
    const parts = this.segments(path)
    if (parts.length === 0) throw new PathError('is_directory', `${path || '.'} is a directory`)
    const parent = await this.#walk(conversationId, parts.slice(0, -1), path, false)
    let handle: FileHandle
    try {
      handle = await parent.openForReading(parts.at(-1)!)
    } catch (error) {
      throw pathFailure(error, path)
    } finally {
      await parent.close()
    }
    try {
      const info = await handle.stat()
      if (info.isDirectory()) throw new PathError('is_directory', `${path} is a directory`)
      if (!info.isFile()) throw new PathError('invalid_path', `${path} is not a regular file`)
      return { handle, size: info.size }
    } catch (error) {
      await handle.close()
      throw error
    }
  }

  /** Reads a file: at most `limit` bytes from `offset`, and its total size. */
  async read(
    conversationId: string,
    path: string,
    options: { offset?: number; limit: number },
  ): Promise<{ bytes: Buffer; size: number }> {
    const { handle, size } = await this.open(conversationId, path)
    try {
      const offset = Math.min(options.offset ?? 0, size)
      const length = Math.min(options.limit, size - offset)
      const bytes = Buffer.alloc(length)
      const { bytesRead } = await handle.read(bytes, 0, length, offset)
      return { bytes: bytes.subarray(0, bytesRead), size }
    } finally {
      await handle.close()
    }
  }

  /**
   * Writes a file (parent directories created), refusing anything that would land outside. The bytes go
   * to a new file beside it, renamed over the name once complete: a client that stops mid-upload, or a
   * body over `maxBytes` (PathError `too_large`), leaves nothing behind (a process killed mid-upload
   * leaves the staging file, which `sweepStaging` removes at the next start). `replaced` is the size of the
   * file it replaced (null when the name was new).
   */
  async write(
    conversationId: string,
    path: string,
    content: Buffer | string | Readable,
    options: { maxBytes?: number; mtimeMs?: number } = {},
  ): Promise<{ path: string; size: number; replaced: number | null }> {
    const parts = this.segments(path)
    if (parts.length === 0) throw new PathError('invalid_path', 'a file path is required')
    // Names the server makes are printable: a line break or an escape in a name would forge lines in
    // listings, logs and terminals. (A name a program made can still be read and deleted.)
    if (controlCharacter.test(path))
      throw new PathError('invalid_path', 'the path contains a control character (a line break, tab, escape, …)')
    const name = parts.at(-1)!
    const parent = await this.#walk(conversationId, parts.slice(0, -1), path, true)
    const staging = `.plinth-upload-${randomUUID()}`
    this.#staging.add(staging)
    let size = 0
    try {
      let handle: FileHandle
      try {
        handle = (await parent.openForWriting(staging, 0o600)).handle
      } catch (error) {
        throw pathFailure(error, path)
      }
      try {
        if (this.#owner) await handle.chown(this.#owner.uid, this.#owner.gid)
        if (content instanceof Readable) {
          const limit = options.maxBytes ?? Number.POSITIVE_INFINITY
          // Not destroyed when refused: an HTTP body left unread is drained, so the answer reaches the client
          // and its connection stays usable (destroying the request would stall a client still sending).
          for await (const chunk of content.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
            size += chunk.length
            // The rest of the body is left unread: the 413 goes out and the connection closes after it.
            if (size > limit) throw new PathError('too_large', `the file is larger than ${limit} bytes`)
            await handle.write(chunk)
          }
        } else {
          const bytes = typeof content === 'string' ? Buffer.from(content) : content
          size = bytes.length
          await handle.write(bytes, 0, bytes.length, 0)
        }
        if (options.mtimeMs !== undefined) await handle.utimes(new Date(), new Date(options.mtimeMs))
      } finally {
        await handle.close()
      }
      const existing = await parent.lstat(name).catch(() => null)
      if (existing?.isDirectory()) throw new PathError('is_directory', `${path} is a directory`)
      // A symlink or special file of that name is replaced, never followed.
      await parent.rename(staging, name).catch((error: unknown) => {
        throw pathFailure(error, path)
      })
      const written = await parent.lstat(name).catch(() => null)
      if (written) this.#noteServerWrite(conversationId, parts.join('/'), written.ctimeMs)
      return { path: parts.join('/'), size, replaced: existing?.isFile() ? existing.size : null }
    } catch (error) {
      await parent.unlink(staging).catch(() => undefined)
      throw error
    } finally {
      this.#staging.delete(staging)
      await parent.close()
    }
  }

  /**
   * Removes the partial uploads a process that died mid-upload left in the work directories (the
   * staging files `write` renames into place once complete), but none of this process's. Answers how
   * many it removed. Each instance's directories are its own, so what is not in flight here is stale.
   */
  async sweepStaging(): Promise<number> {
    let removed = 0
    const walk = async (dir: string, depth: number): Promise<void> => {
      const entries = await readdir(dir, { withFileTypes: true }).catch(() => [])
      for (const entry of entries) {
        // Symlinks are neither followed nor removed: only regular files and real directories.
        if (entry.isDirectory() && depth < 64) await walk(join(dir, entry.name), depth + 1)
        else if (entry.isFile() && stagingName.test(entry.name) && !this.#staging.has(entry.name)) {
          await rm(join(dir, entry.name), { force: true })
          removed++
        }
      }
    }
    await walk(this.root, 0)
    return removed
  }

  #noteServerWrite(conversationId: string, path: string, ctimeMs: number): void {
    const now = Date.now()
    // Only the last minute's matter (an execution's measure looks back a second before its start).
    for (const [id, writes] of this.#serverWrites) {
      for (const [known, write] of writes) if (now - write.at > 60_000) writes.delete(known)
      if (writes.size === 0) this.#serverWrites.delete(id)
    }
    let writes = this.#serverWrites.get(conversationId)
    if (!writes) this.#serverWrites.set(conversationId, (writes = new Map()))
    writes.set(path, { ctimeMs, at: now })
  }

  /** The size of the regular file at `path`, or null when there is none (for a replacement's quota). */
  async fileSize(conversationId: string, path: string): Promise<number | null> {
    const entry = await this.entry(conversationId, path)
    return entry?.type === 'file' ? entry.size : null
  }

  /** What one path is (not following a symlink), or null when nothing is there. */
  async entry(conversationId: string, path: string): Promise<FileEntry | null> {
    const parts = this.segments(path)
    if (parts.length === 0) return null
    const parent = await this.#walk(conversationId, parts.slice(0, -1), path, false).catch(() => null)
    if (!parent) return null
    try {
      const entry = await parent.lstat(parts.at(-1)!).catch(() => null)
      if (!entry) return null
      const type = entryType(entry)
      return {
        path: parts.join('/'),
        type,
        size: type === 'file' ? entry.size : 0,
        modifiedAt: entry.mtime.toISOString(),
      }
    } finally {
      await parent.close()
    }
  }

  /** Entries under a directory of the work directory, recursively, sorted by path (at most `max`). */
  async list(conversationId: string, path = '', max = 10_000): Promise<FileEntry[]> {
    const parts = this.segments(path)
    const start = await this.#walk(conversationId, parts, path, false)
    const entries: FileEntry[] = []
    const walk = async (dir: DirectoryHandle, prefix: string, depth: number): Promise<void> => {
      if (depth > maxDepth || entries.length >= max) return
      for (const name of (await dir.list().catch(() => [])).sort()) {
        if (entries.length >= max) return
        const entry = await dir.lstat(name).catch(() => null)
        if (!entry) continue
        const relative = prefix ? `${prefix}/${name}` : name
        const type = entryType(entry)
        entries.push({
          path: relative,
          type,
          size: type === 'file' ? entry.size : 0,
          modifiedAt: entry.mtime.toISOString(),
        })
        // Symlinks are listed, never followed; a directory swapped for one meanwhile is not opened.
        if (type !== 'directory') continue
        const child = await dir.openDirectory(name).catch(() => null)
        if (!child) continue
        try {
          await walk(child, relative, depth + 1)
        } finally {
          await child.close()
        }
      }
    }
    try {
      await walk(start, parts.join('/'), 0)
    } finally {
      await start.close()
    }
    return entries
  }

  /**
   * What the directory holds: bytes of regular files (apparent size), entries of every kind, and — with
   * `since` — the regular files changed since then (what an execution wrote: the inode's change time,
   * which a program cannot set back as it can the modification time). Counting stops past `maxFiles`
   * entries (`truncated`). A directory at the deepest level paths may name that is not empty is listed
   * in `tooDeep`: what it holds is neither counted nor reachable through the files API. Walked through
   * directory descriptors like everything here.
   */
  async measure(
    conversationId: string,
    options: { since?: number; maxFiles: number },
  ): Promise<{
    bytes: number
    files: number
    recent: Array<{ parts: string[]; size: number }>
    truncated: boolean
    tooDeep: string[][]
  }> {
    const root = await this.#walk(conversationId, [], '', false)
    let bytes = 0
    let files = 0
    let truncated = false
    const recent: Array<{ parts: string[]; size: number }> = []
    const tooDeep: string[][] = []
    // Files the server itself wrote since are not the program's (unless it changed them after).
    const serverWrites = this.#serverWrites.get(conversationId)
    const walk = async (dir: DirectoryHandle, prefix: string[]): Promise<void> => {
      for (const name of await dir.list().catch(() => [] as string[])) {
        if (files > options.maxFiles) {
          truncated = true
          return
        }
        const entry = await dir.lstat(name).catch(() => null)
        if (!entry) continue
        files++
        const parts = [...prefix, name]
        if (entry.isFile()) {
          bytes += entry.size
          if (
            options.since !== undefined &&
            entry.ctimeMs >= options.since &&
            serverWrites?.get(parts.join('/'))?.ctimeMs !== entry.ctimeMs
          )
            recent.push({ parts, size: entry.size })
        } else if (entry.isDirectory()) {
          const child = await dir.openDirectory(name).catch(() => null)
          if (!child) continue
          try {
            if (parts.length < maxDepth) await walk(child, parts)
            else if ((await child.list().catch(() => [])).length > 0) tooDeep.push(parts)
          } finally {
            await child.close()
          }
        }
      }
    }
    try {
      await walk(root, [])
    } finally {
      await root.close()
    }
    return { bytes, files, recent, truncated, tooDeep }
  }

  /**
   * Empties a directory at `parts` that holds more than the server walks (`measure`'s `tooDeep`), with
   * `rm` run inside it through its descriptor: rm descends any depth without following a symlink, and
   * the path that led there is never resolved again.
   */
  async emptyTooDeep(conversationId: string, parts: readonly string[]): Promise<void> {
    const dir = await this.#walk(conversationId, [...parts], parts.join('/'), false).catch(() => null)
    if (!dir) return
    try {
      await dir.removeEverything()
    } finally {
      await dir.close()
    }
  }

  /**
   * Removes regular files by their segments, opening each directory once for all its files (a file
   * swapped for anything else meanwhile is left, and counted in `missed`).
   */
  async removeFiles(
    conversationId: string,
    files: readonly (readonly string[])[],
  ): Promise<{ removed: string[]; missed: number; missedBytes: number }> {
    const byParent = new Map<string, { parent: string[]; names: string[] }>()
    for (const parts of files) {
      if (parts.length === 0) continue
      const key = parts.slice(0, -1).join('/')
      let group = byParent.get(key)
      if (!group) byParent.set(key, (group = { parent: parts.slice(0, -1), names: [] }))
      group.names.push(parts.at(-1)!)
    }
    const removed: string[] = []
    let missed = 0
    let missedBytes = 0
    for (const { parent, names } of byParent.values()) {
      const dir = await this.#walk(conversationId, parent, parent.join('/'), false).catch(() => null)
      if (!dir) {
        missed += names.length
        continue
      }
      try {
        for (const name of names) {
          const entry = await dir.lstat(name).catch(() => null)
          if (
            entry?.isFile() &&
            (await dir.unlink(name).then(
              () => true,
              () => false,
            ))
          )
            removed.push([...parent, name].join('/'))
          else {
            missed++
            if (entry?.isFile()) missedBytes += entry.size
          }
        }
      } finally {
        await dir.close()
      }
    }
    return { removed, missed, missedBytes }
  }

  /** Removes one regular file by its segments (a file swapped for anything else meanwhile is left). */
  async removeFile(conversationId: string, parts: readonly string[]): Promise<number> {
    if (parts.length === 0) return 0
    const parent = await this.#walk(conversationId, parts.slice(0, -1), parts.join('/'), false).catch(() => null)
    if (!parent) return 0
    try {
      const entry = await parent.lstat(parts.at(-1)!).catch(() => null)
      if (!entry?.isFile()) return 0
      await parent.unlink(parts.at(-1)!)
      return entry.size
    } catch {
      return 0
    } finally {
      await parent.close()
    }
  }

  /**
   * Deletes a file, a symlink (never what it points to) or a directory with everything in it; answers
   * what went (bytes of regular files, entries). The work directory itself cannot be deleted.
   */
  async remove(conversationId: string, path: string): Promise<{ bytes: number; files: number }> {
    const parts = this.segments(path)
    if (parts.length === 0)
      throw new PathError('invalid_path', 'the work directory itself cannot be deleted; name a file or directory in it')
    const parent = await this.#walk(conversationId, parts.slice(0, -1), path, false)
    const removed = { bytes: 0, files: 0 }
    const removeIn = async (dir: DirectoryHandle, name: string, depth: number): Promise<void> => {
      const entry = await dir.lstat(name)
      if (entry.isDirectory()) {
        const child = await dir.openDirectory(name)
        try {
          // Deeper than paths may name (a program made it): counted and emptied in one go by `rm`.
          if (parts.length + depth >= maxDepth) {
            const deep = await child.usage()
            removed.bytes += deep.bytes
            removed.files += deep.entries
            await child.removeEverything()
          } else for (const inner of await child.list()) await removeIn(child, inner, depth + 1)
        } finally {
          await child.close()
        }
        await dir.removeDirectory(name)
      } else {
        await dir.unlink(name)
        if (entry.isFile()) removed.bytes += entry.size
      }
      removed.files++
    }
    try {
      await removeIn(parent, parts.at(-1)!, 0)
    } catch (error) {
      throw pathFailure(error, path)
    } finally {
      await parent.close()
    }
    return removed
  }

  /**
   * Removes a conversation's whole directory (retention purged the conversation). `rm` unlinks
   * symlinks rather than following them, so nothing outside the directory goes.
   */
  async discard(conversationId: string): Promise<void> {
    if (!/^[0-9A-Za-z]{1,64}$/.test(conversationId)) throw new PathError('invalid_path', 'bad conversation id')
    await rm(join(this.root, conversationId), { recursive: true, force: true })
    await rm(this.#markerPath(conversationId), { force: true })
  }

  /**
   * Removes this instance's copies of conversations retention purged elsewhere; answers how many. Here
   * the directory is the only copy, and the purge removed it: nothing to do.
   */
  async evictPurged(): Promise<number> {
    return 0
  }

  /** Where the marker of a tree that holds files not owned by the sandbox user lives. */
  #markerPath(conversationId: string): string {
    return join(this.root, '.foreign', conversationId)
  }

  /**
   * Notes that something other than the server's own file operations wrote in the directory as the
   * server's user (a `direct` execution): its files go to the sandbox user before the next sandboxed one.
   */
  async markForeign(conversationId: string): Promise<void> {
    if (!this.#owner) return
    await mkdir(join(this.root, '.foreign'), { recursive: true, mode: 0o700 })
    await writeFile(this.#markerPath(conversationId), '')
  }

  /**
   * Makes the directory ready for a sandboxed execution and returns its path. The tree is handed to
   * the sandbox user only when it may hold files it does not own — after a `direct` execution, or a
   * directory from an older version — and then through directory descriptors: each name's own owner
   * changes (`lchown` relative to an open directory), no symlink is followed, and a file with several
   * hard links is left alone (it may be a link to a host file made by a `direct` program).
   */
  async prepareForSandbox(conversationId: string): Promise<string> {
    const dir = await this.dir(conversationId)
    const owner = this.#owner
    if (!owner) return dir
    const marked = await readFile(this.#markerPath(conversationId)).then(
      () => true,
      () => false,
    )
    if (!marked && (await stat(dir)).uid === owner.uid) return dir
    const root = await DirectoryHandle.openTrusted(dir)
    const walk = async (handle: DirectoryHandle, depth: number): Promise<void> => {
      await handle.chown(owner.uid, owner.gid)
      if (depth > maxDepth) return
      for (const name of await handle.list().catch(() => [])) {
        const entry = await handle.lstat(name).catch(() => null)
        if (!entry || (entry.uid === owner.uid && !entry.isDirectory())) continue
        if (entry.isDirectory()) {
          const child = await handle.openDirectory(name).catch(() => null)
          if (!child) continue
          await walk(child, depth + 1).finally(() => child.close())
        } else if (entry.nlink === 1) {
          await handle.lchown(name, owner.uid, owner.gid).catch(() => undefined)
        }
      }
    }
    try {
      await walk(root, 0)
    } finally {
      await root.close()
    }
    await rm(this.#markerPath(conversationId), { force: true })
    return dir
  }
}
