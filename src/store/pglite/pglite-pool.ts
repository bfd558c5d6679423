import type { PostgresPool, PostgresPoolClient, PostgresQueryResult } from 'kysely'
import { storableParameters } from '../storable.js'
import type { PGlitePreparedStatements } from './prepared-query.js'

/**
 * The subset of a PGlite instance this adapter uses. We type it here instead of importing the
 * package type so that the store's query code depends only on what it calls.
 */
export interface PGliteLike {
  query<R>(sql: string, params?: unknown[]): Promise<{ rows: R[]; affectedRows?: number }>
  exec(sql: string): Promise<Array<{ rows: unknown[]; affectedRows?: number }>>
  close(): Promise<void>
}

const commandPattern = /^\s*(?:--[^\n]*\n\s*)*(\w+)/

/** What one statement may bind (the wire protocol's 16-bit count). */
const maxParameters = 65_535

/** How long the idle session is handed over at once, within one turn of the event loop (ms). */
const turnBudgetMs = 4

/**
 * A `PostgresPool` over one embedded PGlite instance, so Kysely's own Postgres dialect (adapter,
 * query compiler, transactions) serves both engines with the same SQL. PGlite is a single session,
 * so the pool hands out one connection at a time; waiters are served in arrival order.
 */
export class PGlitePool implements PostgresPool {
  readonly #pglite: PGliteLike
  #busy = false
  readonly #waiters: Array<() => void> = []
  /** When the session was first handed over in this turn of the event loop (-1: not yet). */
  #turnStart = -1
  /** Background work waiting for the session to be left alone ({@link PGlitePool.quiet}). */
  readonly #quietWaiters = new Set<() => void>()
  #quietCheck = false

  readonly #prepared: PGlitePreparedStatements | undefined

  /** `prepared`: repeated parameterised statements go through it (named, parsed once). */
  constructor(pglite: PGliteLike, prepared?: PGlitePreparedStatements) {
    this.#pglite = pglite
    this.#prepared = prepared
  }

  async connect(): Promise<PostgresPoolClient> {
    if (this.#busy) {
      await new Promise<void>((resolve) => this.#waiters.push(resolve))
    } else if (this.#turnSpent()) {
      // PGlite answers without I/O, so a chain of statements on an idle session (a request's reads,
      // then its write) would otherwise run within one callback: a server accepting connections
      // took in one request, ran all of it, then the next — under a burst, the last waited for
      // every other run to go (docs/guides/scaling.md#overload). Past the budget, the loop turns first.
      this.#busy = true
      await new Promise<void>((resolve) => setImmediate(resolve))
    }
    this.#busy = true
    if (this.#turnStart < 0) {
      this.#turnStart = performance.now()
      setImmediate(() => {
        this.#turnStart = -1
      })
    }
    let released = false
    const pglite = this.#pglite
    const prepared = this.#prepared
    const client = {
      query: async <R>(sql: string, parameters: ReadonlyArray<unknown>): Promise<PostgresQueryResult<R>> => {
        const command = (commandPattern.exec(sql)?.[1] ?? 'SELECT').toUpperCase() as PostgresQueryResult<R>['command']
        if (parameters.length === 0) {
          // Parameterless text may hold several statements (migrations); the simple protocol runs them all.
          const results = await pglite.exec(sql)
          const last = results.at(-1)
          return { command, rowCount: last?.affectedRows ?? last?.rows.length ?? 0, rows: (last?.rows ?? []) as R[] }
        }
        // The protocol counts parameters in 16 bits: past that, PGlite's session would fall out of step
        // with us for good (every later read empty), where Postgres only refuses the statement.
        if (parameters.length > maxParameters)
          throw Object.assign(
            new Error(`a statement with ${parameters.length} parameters (at most ${maxParameters})`),
            {
              code: '54000',
            },
          )
        const values = [...storableParameters(parameters)]
        const result = prepared?.accepts(sql)
          ? await prepared.query<R>(sql, values)
          : await pglite.query<R>(sql, values)
        return { command, rowCount: result.affectedRows ?? result.rows.length, rows: result.rows }
      },
      release: () => {
        if (released) return
        released = true
        const next = this.#waiters.shift()
        // Handed over on the next turn of the event loop, not in a microtask: PGlite runs in this thread
        // and its statements resolve without I/O, so busy runs handing the session from one to the next
        // would otherwise keep the loop from accepting connections and reading requests — under load the
        // listen backlog filled and clients timed out unanswered (docs/guides/scaling.md#overload).
        if (next) setImmediate(next)
        else {
          this.#busy = false
          this.#checkQuietSoon()
        }
      },
    }
    return client as PostgresPoolClient
  }

  /**
   * Resolves once no statement has waited for or held the session for a whole turn of the event loop
   * — a request's chain of statements is over — or after `maxWaitMs` whatever the load (so background
   * work is slowed, never starved). Background work (ingestion) calls it before each statement: on one
   * thread, a request's every statement would otherwise queue behind the background one in flight.
   */
  quiet(maxWaitMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer)
        this.#quietWaiters.delete(done)
        resolve()
      }
      const timer = setTimeout(done, maxWaitMs)
      this.#quietWaiters.add(done)
      this.#checkQuietSoon()
    })
  }

  #checkQuietSoon(): void {
    if (this.#quietWaiters.size === 0 || this.#quietCheck) return
    this.#quietCheck = true
    setImmediate(() => {
      this.#quietCheck = false
      // Taken again within the turn: a chain goes on, and its release checks again.
      if (this.#busy || this.#waiters.length > 0) return
      for (const done of [...this.#quietWaiters]) done()
    })
  }

  #turnSpent(): boolean {
    return this.#turnStart >= 0 && performance.now() - this.#turnStart > turnBudgetMs
  }

  async end(): Promise<void> {
    await this.#pglite.close()
  }
}
