import { constants } from 'node:fs'
import { chmod, lchown, lstat, mkdir, open, readdir, realpath, stat } from 'node:fs/promises'
import { dirname, join, sep } from 'node:path'

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

export const defaultDeniedSegments = ['.ssh', '.aws', '.gnupg', '.netrc', '.git-credentials', '.docker', '.kube', '.config/gcloud']

/**
 * One directory per conversation under `root`, and the only way the server touches files in it
 * (SPEC §12): paths are relative, without `..`, without sensitive segments (`.ssh`, …), and are
 * checked after `realpath` — of the path itself, or of its nearest existing ancestor for one that
 * does not exist yet — so a symlink cannot lead out. Files are opened without following a final
 * symlink.
 */
export class WorkDirectories {
  readonly root: string
  readonly #denied: string[]
  #rootReady = false

  constructor(root: string, options: { deniedSegments?: readonly string[] } = {}) {
    this.root = root
    this.#denied = (options.deniedSegments ?? defaultDeniedSegments).map((segment) => segment.toLowerCase())
  }

  /**
   * The conversation's directory (created on first use). The root is traversable but not listable
   * (0711), so a sandbox user can reach its own directory by path; each directory is 0700.
   */
  async dir(conversationId: string): Promise<string> {
    if (!/^[0-9A-Za-z]{1,64}$/.test(conversationId)) throw new PathError('invalid_path', 'bad conversation id')
    if (!this.#rootReady) {
      await mkdir(this.root, { recursive: true })
      await chmod(this.root, 0o711)
      this.#rootReady = true
    }
    const dir = join(this.root, conversationId)
    await mkdir(dir, { recursive: true, mode: 0o700 })
    return realpath(dir)
  }

  /** The relative path's segments, or a PathError saying what is wrong with it. */
  segments(path: string): string[] {
    if (path.includes('\0')) throw new PathError('invalid_path', 'the path contains a NUL character')
    if (path.startsWith('/') || /^[A-Za-z]:[\\/]/.test(path)) throw new PathError('invalid_path', 'the path must be relative to the work directory')
    if (path.length > 1024) throw new PathError('invalid_path', 'the path is longer than 1024 characters')
    const parts = path.split('/').filter((part) => part !== '' && part !== '.')
    if (parts.includes('..')) throw new PathError('invalid_path', 'the path must not contain ..')
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

  /** An existing path inside the work directory (realpath-checked). */
  async existing(conversationId: string, path: string): Promise<string> {
    const base = await this.dir(conversationId)
    const target = join(base, ...this.segments(path))
    let real: string
    try {
      real = await realpath(target)
    } catch {
      throw new PathError('not_found', `${path || '.'} does not exist`)
    }
    if (!inside(base, real)) throw new PathError('invalid_path', 'the path leads outside the work directory')
    return real
  }

  /** Reads a file: at most `limit` bytes from `offset`, and its total size. */
  async read(conversationId: string, path: string, options: { offset?: number; limit: number }): Promise<{ bytes: Buffer; size: number }> {
    const real = await this.existing(conversationId, path)
    const handle = await open(real, constants.O_RDONLY | constants.O_NOFOLLOW).catch((error: NodeJS.ErrnoException) => {
      throw new PathError(error.code === 'EISDIR' ? 'is_directory' : 'not_found', `${path} cannot be read (${error.code})`)
    })
    try {
      const info = await handle.stat()
      if (info.isDirectory()) throw new PathError('is_directory', `${path} is a directory`)
      const offset = Math.min(options.offset ?? 0, info.size)
      const length = Math.min(options.limit, info.size - offset)
      const bytes = Buffer.alloc(length)
      await handle.read(bytes, 0, length, offset)
      return { bytes, size: info.size }
    } finally {
      await handle.close()
    }
  }

  /** Writes a file (parent directories created), refusing anything that would land outside. */
  async write(conversationId: string, path: string, content: Buffer | string): Promise<{ path: string; size: number }> {
    const base = await this.dir(conversationId)
    const parts = this.segments(path)
    if (parts.length === 0) throw new PathError('invalid_path', 'a file path is required')
    const target = join(base, ...parts)
    // The nearest existing ancestor decides where a new path really is.
    let ancestor = dirname(target)
    for (;;) {
      const found = await lstat(ancestor).catch(() => null)
      if (found) break
      ancestor = dirname(ancestor)
    }
    if (!inside(base, await realpath(ancestor))) throw new PathError('invalid_path', 'the path leads outside the work directory')
    await mkdir(dirname(target), { recursive: true, mode: 0o700 })
    if (!inside(base, await realpath(dirname(target)))) throw new PathError('invalid_path', 'the path leads outside the work directory')
    const existing = await lstat(target).catch(() => null)
    if (existing?.isDirectory()) throw new PathError('is_directory', `${path} is a directory`)
    const handle = await open(target, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o600).catch((error: NodeJS.ErrnoException) => {
      throw new PathError('invalid_path', error.code === 'ELOOP' ? 'the path is a symlink' : `${path} cannot be written (${error.code})`)
    })
    try {
      await handle.writeFile(content)
    } finally {
      await handle.close()
    }
    return { path: parts.join('/'), size: Buffer.byteLength(content) }
  }

  /** Entries under a directory of the work directory, recursively, sorted by path (at most `max`). */
  async list(conversationId: string, path = '', max = 10_000): Promise<FileEntry[]> {
    const base = await this.dir(conversationId)
    const start = path ? await this.existing(conversationId, path) : base
    const info = await stat(start)
    if (!info.isDirectory()) throw new PathError('invalid_path', `${path} is not a directory`)
    const entries: FileEntry[] = []
    const walk = async (dir: string, depth: number): Promise<void> => {
      if (depth > 32 || entries.length >= max) return
      for (const name of (await readdir(dir)).sort()) {
        if (entries.length >= max) return
        const full = join(dir, name)
        const entry = await lstat(full).catch(() => null)
        if (!entry) continue
        const relative = full.slice(base.length + 1).split(sep).join('/')
        const type = entry.isSymbolicLink() ? 'symlink' : entry.isDirectory() ? 'directory' : entry.isFile() ? 'file' : 'other'
        entries.push({ path: relative, type, size: type === 'file' ? entry.size : 0, modifiedAt: entry.mtime.toISOString() })
        // Symlinks are listed, never followed.
        if (type === 'directory') await walk(full, depth + 1)
      }
    }
    await walk(start, 0)
    return entries
  }

  /** Hands the work directory to the sandbox user (without following symlinks). */
  async handOver(conversationId: string, uid: number, gid: number): Promise<string> {
    const base = await this.dir(conversationId)
    const walk = async (path: string, depth: number): Promise<void> => {
      await lchown(path, uid, gid).catch(() => undefined)
      if (depth > 32) return
      const entry = await lstat(path).catch(() => null)
      if (!entry?.isDirectory()) return
      for (const name of await readdir(path).catch(() => [])) await walk(join(path, name), depth + 1)
    }
    await walk(base, 0)
    return base
  }
}

function inside(base: string, real: string): boolean {
  return real === base || real.startsWith(base + sep)
}
