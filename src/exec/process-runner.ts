import { spawn, type ChildProcess } from 'node:child_process'
import type { Writable } from 'node:stream'
import type { Readable } from 'node:stream'
import { StringDecoder } from 'node:string_decoder'
import type { ExecCgroup } from './cgroups.js'
import type { ExecOptions, ExecResult } from './types.js'

/** How the process is started: the argv of the whole chain (wrappers included). */
export interface Launch {
  argv: string[]
  cwd: string
  env: Record<string, string>
  stdin?: string
  /** Bytes the program reads from fds 3, 4, … in order (bwrap's `--seccomp` filter and `--args`). */
  fds?: readonly Buffer[]
  timeoutMs: number
  outputBytes: number
  /** The execution's cgroup: everything in it is killed when the run ends. */
  cgroup: ExecCgroup | null
}

/**
 * Shell prelude that moves itself into the execution's cgroup before anything runs, then becomes the
 * rest of the command line (`exec`): `sh -c ENTER n procs1 … procsN argv…`.
 */
export const enterCgroupScript =
  'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n - 1)); done; exec "$@"'

const termGraceMs = 200

/** Cgroup removals still in progress (awaited by `settleCleanups`, e.g. at shutdown and in tests). */
const pendingCleanups = new Set<Promise<void>>()

/** Resolves when every finished execution's cgroup has been removed. */
export async function settleCleanups(): Promise<void> {
  while (pendingCleanups.size > 0) await Promise.all([...pendingCleanups])
}

/** Collects one stream: up to `limit` bytes kept, the rest read and dropped; text streamed as it comes. */
class Capture {
  readonly #limit: number
  readonly #chunks: Buffer[] = []
  readonly #decoder = new StringDecoder('utf8')
  #kept = 0
  truncated = false

  constructor(limit: number) {
    this.#limit = limit
  }

  push(chunk: Buffer): string {
    if (this.#kept < this.#limit) {
      const room = this.#limit - this.#kept
      const kept = chunk.length <= room ? chunk : chunk.subarray(0, room)
      this.#chunks.push(kept)
      this.#kept += kept.length
      if (kept.length < chunk.length) this.truncated = true
      return this.#decoder.write(kept)
    }
    this.truncated = true
    return ''
  }

  text(): string {
    // A cut inside a multi-byte character is dropped rather than decoded as a replacement char.
    return new StringDecoder('utf8').write(Buffer.concat(this.#chunks))
  }
}

/** A launch's stdio: the three standard pipes, then one pipe for each extra descriptor (3, 4, …). */
export function launchStdio(fds: readonly Buffer[]): Array<'pipe'> {
  return Array.from({ length: 3 + fds.length }, () => 'pipe' as const)
}

/** Writes each extra descriptor's bytes and closes it; a program that never reads them fails nothing here. */
export function feedDescriptors(child: ChildProcess, fds: readonly Buffer[]): void {
  fds.forEach((bytes, index) => {
    const stream = child.stdio[3 + index] as Writable
    stream.on('error', () => undefined)
    stream.end(bytes)
  })
}

/**
 * Runs a launch to its end: separate stdout/stderr (capped), stdin, a wall-clock timeout and an abort
 * signal. Ending early: the cgroup is killed, then SIGTERM to the process group, then SIGKILL 200 ms
 * later. Resolves on the process's `exit` (not `close`: a grandchild may hold the pipes), after
 * killing whatever is left in its cgroup or process group, so nothing survives the run.
 */
export function runProcess(launch: Launch, options: ExecOptions = {}): Promise<ExecResult> {
  const started = performance.now()
  return new Promise<ExecResult>((resolve) => {
    const [command, ...args] = launch.argv
    const fds = launch.fds ?? []
    const child = spawn(command!, args, { cwd: launch.cwd, env: launch.env, detached: true, stdio: launchStdio(fds) })
    feedDescriptors(child, fds)
    const stdout = new Capture(launch.outputBytes)
    const stderr = new Capture(launch.outputBytes)
    let timedOut = false
    let ending: Promise<void> | null = null
    let settled = false

    const signalGroup = (signal: NodeJS.Signals): void => {
      if (child.pid === undefined) return
      try {
        process.kill(-child.pid, signal)
      } catch {
        // the group is gone
      }
    }
    const exited = (): boolean => child.exitCode !== null || child.signalCode !== null
    const exitWithin = (ms: number): Promise<void> =>
      exited()
        ? Promise.resolve()
        : new Promise((resolve) => {
            const timer = setTimeout(resolve, ms)
            child.once('exit', () => {
              clearTimeout(timer)
              resolve()
            })
          })
    const stop = (): Promise<void> => {
      ending ??= (async () => {
        await launch.cgroup?.killAll(500)
        if (exited()) return
        signalGroup('SIGTERM')
        await exitWithin(termGraceMs)
        if (!exited()) {
          signalGroup('SIGKILL')
          try {
            child.kill('SIGKILL')
          } catch {
            // already gone
          }
        }
      })()
      return ending
    }

    const timer = setTimeout(() => {
      timedOut = true
      void stop()
    }, launch.timeoutMs)
    const onAbort = (): void => void stop()
    if (options.signal?.aborted) onAbort()
    else options.signal?.addEventListener('abort', onAbort, { once: true })

    child.stdout.on('data', (chunk: Buffer) => {
      const text = stdout.push(chunk)
      if (text) options.onOutput?.('stdout', text)
    })
    child.stderr.on('data', (chunk: Buffer) => {
      const text = stderr.push(chunk)
      if (text) options.onOutput?.('stderr', text)
    })
    child.stdin.on('error', () => undefined) // a program that does not read its stdin
    child.stdin.end(launch.stdin ?? '')

    const finish = async (exitCode: number | null, signal: string | null, spawnError?: string): Promise<void> => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      options.signal?.removeEventListener('abort', onAbort)
      // Whatever the program left behind (a daemon it double-forked, a background job) goes too.
      if (launch.cgroup) await launch.cgroup.killAll(1000)
      signalGroup('SIGKILL')
      // Output already written is still in the pipes: a short wait for it, then the pipes close.
      await Promise.race([
        Promise.all([streamEnd(child.stdout), streamEnd(child.stderr)]),
        new Promise((resolve) => setTimeout(resolve, 200)),
      ])
      child.stdout.destroy()
      child.stderr.destroy()
      // Everything in the group is dead; removing the directory waits for the kernel to finish
      // reaping, which the caller need not wait for.
      if (launch.cgroup) {
        const cleanup: Promise<void> = launch.cgroup.remove().finally(() => {
          pendingCleanups.delete(cleanup)
        })
        pendingCleanups.add(cleanup)
      }
      resolve({
        exitCode,
        signal,
        stdout: stdout.text(),
        stderr: spawnError ? `${stderr.text()}${spawnError}` : stderr.text(),
        truncated: stdout.truncated || stderr.truncated,
        durationMs: Math.round(performance.now() - started),
        timedOut,
      })
    }
    child.once('exit', (code, signal) => void finish(code, signal))
    child.once('error', (error) => void finish(127, null, `cannot start ${command}: ${error.message}\n`))
  })
}

function streamEnd(stream: Readable): Promise<void> {
  if (stream.readableEnded || stream.destroyed) return Promise.resolve()
  return new Promise((resolve) => {
    stream.once('end', () => resolve())
    stream.once('close', () => resolve())
  })
}
