import { fork, type ChildProcess } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { TextChunk } from './chunker.js'
import { defaultExtractLimits, ExtractError, type ExtractLimits, type SourceFormat } from './extract.js'
import type { ExtractAnswer, ExtractJob } from './extract-worker.js'

export interface DocumentExtractorOptions {
  /** The parser's V8 heap, MiB (`--max-old-space-size`). */
  heapMb?: number
  /** The parser process's resident memory, MiB: past it the process is killed and the document fails. */
  rssMb?: number
  /** How long one document may take. */
  timeoutMs?: number
  limits?: Partial<ExtractLimits>
}

/** A document's text and its chunks. */
export interface Extracted {
  text: string
  pieces: TextChunk[]
}

const here = fileURLToPath(import.meta.url)
// From the TypeScript sources (tests, `tsx`) the child needs tsx's loader too; built code runs as is.
const fromSources = here.endsWith('.ts')
const workerEntry = join(dirname(here), fromSources ? 'extract-worker.ts' : 'extract-worker.js')
const idleMs = 30_000

/**
 * Parses untrusted documents in a child process (docs/security.md, "untrusted documents"): one
 * long-lived child, one document at a time, with a capped heap, a resident-memory watchdog and a
 * time limit. A document that breaks a limit, or crashes the parser, fails with a reason and costs
 * only the child, which is started again for the next document; the server's event loop never runs
 * the parser.
 */
export class DocumentExtractor {
  readonly #options: Required<Omit<DocumentExtractorOptions, 'limits'>> & { limits: ExtractLimits }
  #child: ChildProcess | null = null
  #nextId = 1
  #tail: Promise<unknown> = Promise.resolve()
  #stopped = false
  #idleTimer: NodeJS.Timeout | null = null

  constructor(options: DocumentExtractorOptions = {}) {
    this.#options = {
      heapMb: 512,
      rssMb: 1024,
      timeoutMs: 120_000,
      ...options,
      limits: { ...defaultExtractLimits, ...options.limits },
    }
  }

  get limits(): ExtractLimits {
    return this.#options.limits
  }

  /** The text and chunks of a document (or of a text, `format` null); an ExtractError says why not. */
  extract(input: {
    format: SourceFormat | null
    bytes?: Uint8Array | null
    path?: string | null
    text?: string | null
  }): Promise<Extracted> {
    if (this.#idleTimer) clearTimeout(this.#idleTimer)
    const run = this.#tail.then(() => this.#run(input))
    const tail = run.then(
      () => undefined,
      () => undefined,
    )
    this.#tail = tail
    // A child idle for a while is ended: its memory goes back to the system until the next document.
    void tail.then(() => {
      if (this.#tail !== tail || this.#stopped) return
      this.#idleTimer = setTimeout(() => {
        this.#child?.kill('SIGKILL')
        this.#child = null
      }, idleMs)
      this.#idleTimer.unref()
    })
    return run
  }

  /** Ends the child (after the document in hand, if any, is abandoned). */
  async stop(): Promise<void> {
    this.#stopped = true
    if (this.#idleTimer) clearTimeout(this.#idleTimer)
    this.#child?.kill('SIGKILL')
    this.#child = null
  }

  #spawn(): ChildProcess {
    const execArgv = [`--max-old-space-size=${this.#options.heapMb}`]
    if (fromSources) execArgv.unshift('--import', pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href)
    const child = fork(workerEntry, [], {
      execArgv,
      serialization: 'advanced',
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      env: { NODE_ENV: process.env.NODE_ENV ?? 'production', PATH: process.env.PATH ?? '/usr/bin:/bin' },
    })
    // Its stderr is read and dropped; an idle child does not keep the server's process alive.
    child.stderr?.on('data', () => undefined)
    child.unref()
    child.channel?.unref()
    child.once('exit', () => {
      if (this.#child === child) this.#child = null
    })
    return child
  }

  async #run(input: {
    format: SourceFormat | null
    bytes?: Uint8Array | null
    path?: string | null
    text?: string | null
  }): Promise<Extracted> {
    if (this.#stopped) throw new ExtractError('the server is stopping')
    const child = (this.#child ??= this.#spawn())
    const job: ExtractJob = {
      id: this.#nextId++,
      format: input.format,
      bytes: input.bytes ?? null,
      path: input.path ?? null,
      text: input.text ?? null,
      limits: this.#options.limits,
    }
    return new Promise<Extracted>((resolve, reject) => {
      let settled = false
      const finish = (outcome: { answer?: ExtractAnswer; failure?: string }): void => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        clearInterval(watchdog)
        child.off('message', onMessage)
        child.off('exit', onExit)
        if (outcome.failure !== undefined) {
          // Whatever state the parser was left in, the next document gets a fresh one.
          child.kill('SIGKILL')
          if (this.#child === child) this.#child = null
          return reject(new ExtractError(outcome.failure))
        }
        const answer = outcome.answer!
        if (answer.ok) resolve({ text: answer.text, pieces: answer.pieces })
        else reject(new ExtractError(answer.error))
      }
      const onMessage = (answer: ExtractAnswer): void => {
        if (answer.id === job.id) finish({ answer })
      }
      const onExit = (code: number | null, signal: string | null): void => {
        finish({
          failure: `the parser stopped (${signal ?? `exit ${code}`}): the document is too large or malformed for it (heap limit ${this.#options.heapMb} MB)`,
        })
      }
      const timer = setTimeout(
        () =>
          finish({ failure: `the document took longer than ${Math.round(this.#options.timeoutMs / 1000)} s to read` }),
        this.#options.timeoutMs,
      )
      const watchdog = setInterval(() => {
        void residentMb(child.pid).then((rss) => {
          if (rss !== null && rss > this.#options.rssMb)
            finish({ failure: `the document needed more than ${this.#options.rssMb} MB of memory to read` })
        })
      }, 200)
      child.on('message', onMessage)
      child.once('exit', onExit)
      child.send(job, (error) => {
        if (error) finish({ failure: `the parser could not be reached: ${error.message}` })
      })
    })
  }
}

/** A process's resident memory in MiB (Linux), or null. */
async function residentMb(pid: number | undefined): Promise<number | null> {
  if (pid === undefined) return null
  try {
    const pages = Number((await readFile(`/proc/${pid}/statm`, 'utf8')).split(' ')[1])
    return (pages * 4096) / (1024 * 1024)
  } catch {
    return null
  }
}
