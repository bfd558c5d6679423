import { spawn, type ChildProcess } from 'node:child_process'
import { ReadBuffer, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js'
import { feedDescriptors, launchStdio } from '../exec/index.js'
import type { SandboxLaunch } from './types.js'

/** How long a server may take to exit once its stdin is closed, before it is killed. */
const exitGraceMs = 1000
/** After the process exits, how long its last output may take to arrive. */
const drainMs = 200

/**
 * The stdio transport of a sandboxed MCP server. The SDK's StdioClientTransport cannot hand the
 * seccomp filter to bwrap on fd 3, so this one spawns the launch itself: stdin/stdout carry the
 * messages (framed by the SDK's ReadBuffer and serializeMessage), stderr goes to `onStderr`, the filter
 * is written to fd 3. The process gets its own process group; closing ends stdin, waits a moment, then
 * kills the group, and the launch's `release` kills whatever is left in its cgroup.
 */
export class LaunchTransport implements Transport {
  onclose?: () => void
  onerror?: (error: Error) => void
  onmessage?: (message: JSONRPCMessage) => void
  readonly #prepare: () => Promise<SandboxLaunch>
  readonly #onStderr: (text: string) => void
  readonly #buffer = new ReadBuffer()
  #child: ChildProcess | null = null
  /** Resolves once the process has exited and been released (onclose then called). */
  #ended: Promise<void> | null = null
  #closing: Promise<void> | null = null
  /** The last complaint of bwrap itself on stderr (never the server's own output, which may hold anything). */
  sandboxError: string | null = null

  constructor(prepare: () => Promise<SandboxLaunch>, onStderr: (text: string) => void) {
    this.#prepare = prepare
    this.#onStderr = onStderr
  }

  async start(): Promise<void> {
    if (this.#child || this.#closing) throw new Error('LaunchTransport already started')
    const launch = await this.#prepare()
    if (this.#closing) {
      await launch.release()
      throw new Error('the transport was closed while starting')
    }
    const [command, ...args] = launch.argv
    let child: ChildProcess
    try {
      child = spawn(command!, args, {
        cwd: launch.cwd,
        env: launch.env,
        detached: true,
        stdio: launchStdio(launch.fds),
      })
      await new Promise<void>((resolve, reject) => {
        child.once('spawn', resolve)
        child.once('error', reject)
      })
    } catch (error) {
      await launch.release()
      throw error
    }
    this.#child = child
    feedDescriptors(child, launch.fds)
    for (const stream of [child.stdin!, child.stdout!, child.stderr!])
      stream.on('error', (error: Error) => this.onerror?.(error))
    child.stderr!.on('data', (chunk: Buffer) => {
      const text = chunk.toString('utf8')
      const complaint = text.split('\n').findLast((line) => line.startsWith('bwrap: '))
      if (complaint) this.sandboxError = complaint.slice(0, 200)
      this.#onStderr(text)
    })
    child.stdout!.on('data', (chunk: Buffer) => {
      try {
        this.#buffer.append(chunk)
      } catch (error) {
        // More than the buffer holds without a newline: the server is broken.
        this.onerror?.(error as Error)
        void this.close()
        return
      }
      for (;;) {
        let message: JSONRPCMessage | null
        try {
          message = this.#buffer.readMessage()
        } catch (error) {
          // A line that is not JSON-RPC: skipped (it was consumed), the next ones still count.
          this.onerror?.(error as Error)
          continue
        }
        if (message === null) break
        this.onmessage?.(message)
      }
    })
    this.#ended = new Promise<void>((resolve) => {
      child.once('exit', () => {
        void (async () => {
          await Promise.race([
            new Promise((done) => child.stdout!.once('close', done)),
            new Promise((done) => setTimeout(done, drainMs)),
          ])
          killGroup(child, 'SIGKILL')
          child.stdout!.destroy()
          child.stderr!.destroy()
          await launch.release().catch((error: unknown) => this.onerror?.(error as Error))
          this.#buffer.clear()
          resolve()
          this.onclose?.()
        })()
      })
    })
    if (this.#closing) {
      // Closed while spawning: nothing may stay behind.
      killGroup(child, 'SIGKILL')
      await this.#ended
      throw new Error('the transport was closed while starting')
    }
  }

  send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.#child?.stdin
    if (!stdin?.writable || this.#closing) return Promise.reject(new Error('Not connected'))
    return new Promise((resolve) => {
      if (stdin.write(serializeMessage(message))) resolve()
      else stdin.once('drain', () => resolve())
    })
  }

  /** The pid of the process that was spawned (the head of the wrapper chain), or null. */
  get pid(): number | null {
    return this.#child?.pid ?? null
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      const child = this.#child
      const ended = this.#ended
      if (!child || !ended) return
      child.stdin?.end()
      const exited = await Promise.race([
        ended.then(() => true),
        new Promise<boolean>((resolve) => setTimeout(() => resolve(false), exitGraceMs)),
      ])
      if (!exited) killGroup(child, 'SIGKILL')
      await ended
    })()
    return this.#closing
  }
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return
  try {
    process.kill(-child.pid, signal)
  } catch {
    // the group is gone
  }
}
