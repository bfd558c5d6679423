import { sql } from 'kysely'
import { kysely, type Executor } from './executor.js'

/**
 * The statement that commits with its WAL flush deferred (docs/guides/scaling.md#deferred-wal-flush):
 * it turns `synchronous_commit` off for its own transaction, so the locks it holds (the audit chain's
 * tail) go at commit instead of after the flush. The store answers its caller only once `WalFlush`
 * saw the flush.
 */
export const deferFlushColumn = sql`set_config('synchronous_commit', 'off', true) as flush_deferred`

/**
 * A barrier: a transactional WAL record, whose commit waits for the flush of all WAL before it (other
 * sessions' too). It changes no table, so concurrent barriers contend for nothing but the flush.
 */
export async function walBarrier(db: Executor): Promise<void> {
  await sql`select pg_logical_emit_message(true, 'plinth.flush', '')`.execute(kysely(db))
}

interface Waiters {
  promise: Promise<void>
  resolve: () => void
  reject: (error: unknown) => void
}

/**
 * Waits for the WAL flush of commits made without it. Each wait needs a barrier (a commit that waits
 * for the flush) begun after the caller's commit; one barrier is in flight at a time, and those who
 * ask meanwhile share the next one — one flush answers all of them, whatever their number.
 */
export class WalFlush {
  readonly #barrier: () => Promise<void>
  #inFlight = false
  #next: Waiters | undefined

  constructor(barrier: () => Promise<void>) {
    this.#barrier = barrier
  }

  /** Whether this database lets the server write the barrier (a role may lack the right). */
  async available(): Promise<boolean> {
    return this.#barrier().then(
      () => true,
      () => false,
    )
  }

  /** Resolves once every commit this process made before the call is on disk; rejects when that is not known. */
  after(): Promise<void> {
    this.#next ??= waiters()
    const { promise } = this.#next
    if (!this.#inFlight) this.#start()
    return promise
  }

  #start(): void {
    const current = this.#next
    this.#next = undefined
    if (!current) return
    this.#inFlight = true
    void this.#barrier()
      .then(current.resolve, current.reject)
      .finally(() => {
        this.#inFlight = false
        this.#start()
      })
  }
}

function waiters(): Waiters {
  let resolve!: () => void
  let reject!: (error: unknown) => void
  const promise = new Promise<void>((yes, no) => {
    resolve = yes
    reject = no
  })
  return { promise, resolve, reject }
}
