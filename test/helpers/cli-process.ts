import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { fileURLToPath } from 'node:url'

/** The real `plinth` executable, as a user runs it. */
export const plinthBin = fileURLToPath(new URL('../../bin/plinth.js', import.meta.url))

/** Variables that configure Plinth: stripped from the inherited environment so the developer's own settings cannot leak into a test. */
const configVars = /^(PLINTH_|OTEL_|VITEST|TEST_DATABASE_URL$|DATABASE_URL$|PORT$|HOST$|NODE_OPTIONS$)/

/**
 * A clean environment for a CLI process, plus `extra`. It runs the compiled build (test/global-setup.ts
 * compiles it when a source changed); `PLINTH_FROM_SOURCE: '1'` in `extra` runs the sources through tsx.
 */
export function cliEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {}
  for (const [name, value] of Object.entries(process.env)) if (!configVars.test(name)) env[name] = value
  // Shedding runs as overload depends on how loaded the machine is; the tests that want it say so.
  return {
    ...env,
    PLINTH_OVERLOAD_LOOP_DELAY_MS: '0',
    PLINTH_OVERLOAD_DB_WAIT_MS: '0',
    PLINTH_OVERLOAD_ADMIT_MS: '0',
    PLINTH_OVERLOAD_MAX_ACTIVE_RUNS: '0',
    PLINTH_OVERLOAD_ADAPTIVE_CAP_SECONDS: '0',
    ...extra,
  }
}

export interface CliResult {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
}

export interface CliOptions {
  cwd: string
  env?: Record<string, string>
  /** Another copy of bin/plinth.js (an installed package); default: this checkout's. */
  bin?: string
  /** Extra arguments after the command (e.g. --strict-plugins). */
  args?: string[]
  /** Kill the process when it has not exited by then (default 120 s: a first PGlite initdb is slow on a busy machine). */
  timeoutMs?: number
  /** What the process reads on its standard input, which then ends (default: none, closed). */
  input?: string
  /** Starts reading its standard output only after this long (a slow reader); default: at once. */
  readStdoutAfterMs?: number
}

/** Runs `plinth <args>` to completion. */
export async function runPlinth(args: string[], options: CliOptions): Promise<CliResult> {
  const child = spawn(process.execPath, [options.bin ?? plinthBin, ...args, ...(options.args ?? [])], {
    cwd: options.cwd,
    env: cliEnv(options.env),
    stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  })
  if (options.input !== undefined) child.stdin?.end(options.input)
  let stdout = ''
  let stderr = ''
  const read = (): void => void child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
  // A slow reader (`| wc -c` on a busy machine): the output waits in the pipe for a while.
  if (options.readStdoutAfterMs) setTimeout(read, options.readStdoutAfterMs)
  else read()
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000)
  try {
    const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null]
    return { code, signal, stdout, stderr }
  } finally {
    clearTimeout(timer)
  }
}

/** A loopback port nobody listens on right now. */
export async function freePort(): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  const port = typeof address === 'object' && address ? address.port : 0
  server.close()
  await once(server, 'close')
  return port
}

export interface ServeProcess {
  child: ChildProcess
  pid: number
  port: number
  /** `http://127.0.0.1:<port>`, as announced by the listening log line. */
  url: string
  /** The parsed JSON log line announcing the listener. */
  listening: Record<string, unknown>
  stdout(): string
  stderr(): string
  /** Sends SIGTERM and resolves to the exit code once the process has exited. */
  stop(signal?: NodeJS.Signals): Promise<number | null>
  /** SIGKILLs the process if it still runs (for cleanup). */
  kill(): Promise<void>
}

/** Starts `plinth serve` on a free port and waits for its "listening on" log line. */
export async function startServe(options: CliOptions): Promise<ServeProcess> {
  const port = await freePort()
  const child = spawn(process.execPath, [options.bin ?? plinthBin, 'serve', ...(options.args ?? [])], {
    cwd: options.cwd,
    env: cliEnv({ PORT: String(port), ...options.env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stdout = ''
  let stderr = ''
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)))
  const listening = await new Promise<{ line: Record<string, unknown>; url: string }>((resolve, reject) => {
    let settled = false
    const timer = setTimeout(() => fail('timed out waiting for the listening log line'), options.timeoutMs ?? 120_000)
    function fail(reason: string): void {
      if (settled) return
      settled = true
      clearTimeout(timer)
      child.kill('SIGKILL')
      reject(new Error(`plinth serve did not start: ${reason}\nstdout:\n${stdout}\nstderr:\n${stderr}`))
    }
    void exited.then((code) => fail(`exited with code ${code}`))
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk
      if (settled) return
      // Complete lines only: the last element is a line still being written.
      for (const text of stdout.split('\n').slice(0, -1)) {
        const match = /"msg":"plinth \S+ listening on (http:\/\/[^"]+)"/.exec(text)
        if (match?.[1]) {
          settled = true
          clearTimeout(timer)
          resolve({ line: JSON.parse(text) as Record<string, unknown>, url: match[1] })
          return
        }
      }
    })
  })
  return {
    child,
    pid: child.pid ?? 0,
    port,
    url: listening.url,
    listening: listening.line,
    stdout: () => stdout,
    stderr: () => stderr,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal)
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000)
      try {
        return await exited
      } finally {
        clearTimeout(timer)
      }
    },
    async kill() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL')
        await exited
      }
    },
  }
}

export interface HttpAnswer {
  status: number
  contentType: string
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary JSON
  body: any
}

/** A JSON request to a running server. */
export async function http(
  url: string,
  method: string,
  path: string,
  options: { token?: string; body?: unknown } = {},
): Promise<HttpAnswer> {
  const headers: Record<string, string> = {}
  if (options.token) headers.authorization = `Bearer ${options.token}`
  if (options.body !== undefined) headers['content-type'] = 'application/json'
  const response = await fetch(url + path, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  })
  const text = await response.text()
  const contentType = response.headers.get('content-type') ?? ''
  return { status: response.status, contentType, body: /json/.test(contentType) && text ? JSON.parse(text) : text }
}

/** The last non-empty line of some output. */
export function lastLine(output: string): string {
  return output.trimEnd().split('\n').at(-1) ?? ''
}
