import { spawn, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { registerCleanup } from './cleanup.js'

/** A server under test running in its own process, so the load generator does not share its event loop. */
export interface ChildServer {
  /** Base URL from the child's ready line. */
  url: string
  /** The JSON object the child appended to its ready line (e.g. a token), or `{}`. */
  info: Record<string, unknown>
  /** Asks the child to close (SIGTERM), SIGKILLs it after a grace period; resolves once it has exited. */
  stop(): Promise<void>
}

export interface ChildServerOptions {
  /** Extra environment for the child (on top of the bench's own, minus Plinth settings). */
  env?: Record<string, string>
  /** How long to wait for the ready line (PGlite start + migrations + seeding). */
  readyTimeoutMs?: number
  /** The checkout the script runs from (default: this one), e.g. a baseline to compare with. */
  root?: string
}

const repoRoot = fileURLToPath(new URL('../../', import.meta.url))
const live = new Set<ChildProcess>()

// Last resort on an abrupt exit of the bench: never leave a server running.
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL')
})

/**
 * Runs `node --import tsx <script>` (path relative to the repo root) and waits for its stdout line
 * `ready <url> [json]` (see `announceReady`).
 */
export async function startChildServer(script: string, options: ChildServerOptions = {}): Promise<ChildServer> {
  // BENCH_CPU_PROF=<dir>: each child writes a V8 CPU profile there on exit (open it in Chrome DevTools).
  const profile = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : []
  const child = spawn(process.execPath, [...profile, '--import', 'tsx', script], {
    cwd: options.root ?? repoRoot,
    // BENCH_SERVER_NODE_OPTIONS: Node flags for the servers only (say, a young-generation size to compare).
    env: {
      ...inheritedEnv(),
      NODE_ENV: 'production',
      ...(process.env.BENCH_SERVER_NODE_OPTIONS && { NODE_OPTIONS: process.env.BENCH_SERVER_NODE_OPTIONS }),
      ...options.env,
    },
    // stdin is a pipe the child watches: if the bench dies hard, EOF tells the child to exit.
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  live.add(child)
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  void exited.then(() => live.delete(child))

  const stop = registerCleanup(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
      await exited
      clearTimeout(timer)
    }
  })

  try {
    const ready = await waitForReady(child, script, options.readyTimeoutMs ?? 60_000)
    return { ...ready, stop }
  } catch (error) {
    await stop()
    throw error
  }
}

function waitForReady(child: ChildProcess, script: string, timeoutMs: number): Promise<Omit<ChildServer, 'stop'>> {
  return new Promise((resolve, reject) => {
    if (!child.stdout) return reject(new Error(`${script}: no stdout pipe`))
    const lines = createInterface({ input: child.stdout })
    let ready = false
    const timer = setTimeout(() => reject(new Error(`${script}: no ready line within ${timeoutMs} ms`)), timeoutMs)
    lines.on('line', (line) => {
      const match = /^ready (\S+)(?: (.*))?$/.exec(line)
      if (ready || !match) {
        // Anything else the child prints is diagnostics; keep it visible but off the results.
        process.stderr.write(`[${script}] ${line}\n`)
        return
      }
      ready = true
      clearTimeout(timer)
      try {
        resolve({ url: match[1]!, info: match[2] ? (JSON.parse(match[2]) as Record<string, unknown>) : {} })
      } catch (error) {
        reject(new Error(`${script}: unreadable ready line: ${String(error)}`))
      }
    })
    child.once('exit', (code, signal) => {
      clearTimeout(timer)
      if (!ready) reject(new Error(`${script} exited before it was ready (code ${code}, signal ${signal})`))
    })
    child.once('error', (error) => {
      clearTimeout(timer)
      reject(error)
    })
  })
}

/** The bench's environment without Plinth settings, so a developer's shell does not change what is measured. */
function inheritedEnv(): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [key, value] of Object.entries(process.env)) {
    if (value === undefined || key.startsWith('PLINTH_') || key === 'DATABASE_URL' || key === 'PORT' || key === 'HOST')
      continue
    env[key] = value
  }
  return env
}
