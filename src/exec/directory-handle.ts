import { execFile } from 'node:child_process'
import { constants, type Stats } from 'node:fs'
import { lchown, lstat, mkdir, open, readdir, rename, rmdir, unlink, type FileHandle } from 'node:fs/promises'

/**
 * Flags for every open below a directory handle: never follow a symlink in the last component, never
 * block on a FIFO a program left there, never become the controlling terminal.
 */
const noFollow = constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY
const directoryFlags = constants.O_RDONLY | constants.O_DIRECTORY | noFollow

/** Runs a program in `cwd` to its end; its stdout, or an error with its stderr. */
function runIn(cwd: string, command: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { cwd, maxBuffer: 1024 * 1024, timeout: 120_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${command} failed: ${String(stderr).trim() || error.message}`))
      else resolve(String(stdout))
    })
  })
}

/** A name that is one path component: no separator, not `.` or `..`, no NUL. */
function checkName(name: string): void {
  if (name === '' || name === '.' || name === '..' || name.includes('/') || name.includes('\0'))
    throw new Error(`not a single path component: ${JSON.stringify(name)}`)
}

/**
 * An open directory, and the operations the server makes inside it *relative to the open directory*
 * (docs/security.md, "work directories"). Each name is one component looked up in the directory the
 * descriptor holds, through the kernel's `/proc/self/fd/N/name` — the `*at()` system calls Node does
 * not expose — and a symlink in that last component is never followed (`O_NOFOLLOW`, `lstat`,
 * `lchown`, `unlink`). A program that swaps a directory for a symlink while the server works can make
 * an operation fail, never make it reach outside: the server walks a tree one component at a time,
 * holding each directory open, and never resolves a path it checked earlier.
 */
export class DirectoryHandle {
  readonly #handle: FileHandle

  private constructor(handle: FileHandle) {
    this.#handle = handle
  }

  /** Opens a directory by an absolute path the server alone controls (a work directory's root). */
  static async openTrusted(path: string): Promise<DirectoryHandle> {
    return new DirectoryHandle(await open(path, directoryFlags))
  }

  /** The kernel path of `name` inside this directory (valid while the handle is open). */
  at(name: string): string {
    checkName(name)
    return `/proc/self/fd/${this.#handle.fd}/${name}`
  }

  /** The kernel path of this directory itself (for readdir, and as a spawn's cwd). */
  get path(): string {
    return `/proc/self/fd/${this.#handle.fd}`
  }

  stat(): Promise<Stats> {
    return this.#handle.stat()
  }

  /** Opens a subdirectory; fails (ELOOP, ENOTDIR) when the name is a symlink or not a directory. */
  async openDirectory(name: string): Promise<DirectoryHandle> {
    return new DirectoryHandle(await open(this.at(name), directoryFlags))
  }

  /** Makes a subdirectory (a symlink of that name is never followed: mkdir fails with EEXIST). */
  async makeDirectory(name: string, mode: number): Promise<void> {
    await mkdir(this.at(name), { mode })
  }

  /** Opens a file for reading without following a symlink or blocking on a FIFO. */
  openForReading(name: string): Promise<FileHandle> {
    return open(this.at(name), constants.O_RDONLY | noFollow)
  }

  /** Creates a new file (fails with EEXIST when anything has the name), or opens an existing one. */
  async openForWriting(name: string, mode: number): Promise<{ handle: FileHandle; created: boolean }> {
    try {
      return {
        handle: await open(this.at(name), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | noFollow, mode),
        created: true,
      }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
      return { handle: await open(this.at(name), constants.O_WRONLY | noFollow), created: false }
    }
  }

  /** Names in this directory. */
  list(): Promise<string[]> {
    return readdir(this.path)
  }

  /** What the name is, without following a symlink. */
  lstat(name: string): Promise<Stats> {
    return lstat(this.at(name))
  }

  /** Changes the owner of the name itself (a symlink's own owner, never its target's). */
  lchown(name: string, uid: number, gid: number): Promise<void> {
    return lchown(this.at(name), uid, gid)
  }

  unlink(name: string): Promise<void> {
    return unlink(this.at(name))
  }

  /** Renames within this directory; whatever `to` names (a file, a symlink) is replaced, never followed. */
  rename(from: string, to: string): Promise<void> {
    return rename(this.at(from), this.at(to))
  }

  removeDirectory(name: string): Promise<void> {
    return rmdir(this.at(name))
  }

  /**
   * Removes everything inside this directory, however deep, leaving it empty: `rm -rf` run with this
   * descriptor as its working directory (the path that led here is not resolved again), on each name
   * (never `.`), staying on this file system. rm walks with openat and O_NOFOLLOW, so a symlink is
   * removed, never followed.
   */
  async removeEverything(): Promise<void> {
    const names = await this.list()
    for (let start = 0; start < names.length; start += 1000) {
      const batch = names.slice(start, start + 1000).map((name) => `./${name}`)
      await runIn(this.#spawnPath, 'rm', ['-rf', '--one-file-system', '--', ...batch])
    }
  }

  /** Apparent bytes and entries below this directory, however deep (`du`, which follows no symlink). */
  async usage(): Promise<{ bytes: number; entries: number }> {
    const first = (text: string) => Number(text.split('\t')[0]) || 0
    const bytes = first(await runIn(this.#spawnPath, 'du', ['-s', '-b', '-x', '.']))
    // The directory itself is one of the inodes du counts.
    const entries = Math.max(0, first(await runIn(this.#spawnPath, 'du', ['-s', '-x', '--inodes', '.'])) - 1)
    return { bytes, entries }
  }

  /** This directory as a child process's working directory (its own /proc/self is not the server's). */
  get #spawnPath(): string {
    return `/proc/${process.pid}/fd/${this.#handle.fd}`
  }

  /** Changes this directory's own owner (through its descriptor). */
  chown(uid: number, gid: number): Promise<void> {
    return this.#handle.chown(uid, gid)
  }

  close(): Promise<void> {
    return this.#handle.close()
  }
}
