import { sql } from 'kysely'
import { kysely, type Executor } from './executor.js'

/** The channel on which a run's lease holder is told to stop (its run was cancelled or ended elsewhere). */
export const runsChannel = 'plinth_runs'

export type RunSignalListener = (runId: string | null) => void

/**
 * Tells every instance that a run was ended by someone other than its driver. Inside a transaction it
 * is delivered on commit, so the driver, when it looks, finds the run already ended.
 */
export async function announceRunEnded(db: Executor, runId: string): Promise<void> {
  await sql`select pg_notify(${runsChannel}, ${runId})`.execute(kysely(db))
}

/** In-process fan-out of run notifications (from this and every other instance). */
export class RunSignals {
  readonly #listeners = new Set<RunSignalListener>()

  subscribe(listener: RunSignalListener): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  /** A notification's payload; none (the listener reconnected and may have missed some) means any run. */
  deliver(payload?: string): void {
    const runId = payload && /^[0-9A-Z]{26}$/.test(payload) ? payload : null
    for (const listener of this.#listeners) listener(runId)
  }
}
