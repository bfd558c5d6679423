import type { PluginLogger } from '../extension/index.js'
import { deleteOldRunEvents, lockRetentionSweep, type Store } from '../store/index.js'

/** How long what is kept is kept (docs/guides/operating.md#retention); unset: for ever. */
export interface RetentionSettings {
  /** Days after a run ends that its events (the streams' replay) are kept. */
  runEventsDays?: number
  /** How often each instance sweeps (default 10 minutes). */
  sweepMs?: number
}

/**
 * Deletes what is past its retention, in batches (each its own short transaction, so no long lock and
 * no huge WAL burst), on every instance in turn: a lock in the database lets one sweep at a time.
 */
export class RetentionSweeper {
  readonly #store: Store
  readonly #log: PluginLogger
  readonly #settings: RetentionSettings
  #timer: NodeJS.Timeout | undefined
  #running: Promise<number> | null = null

  constructor(store: Store, log: PluginLogger, settings: RetentionSettings) {
    this.#store = store
    this.#log = log
    this.#settings = settings
  }

  get enabled(): boolean {
    return this.#settings.runEventsDays !== undefined
  }

  start(): void {
    if (!this.enabled) return
    this.#timer = setInterval(() => void this.sweep(), this.#settings.sweepMs ?? 600_000)
    this.#timer.unref()
    void this.sweep()
  }

  stop(): void {
    clearInterval(this.#timer)
    this.#timer = undefined
  }

  /** One sweep (overlapping calls share it): the number of rows deleted. */
  sweep(): Promise<number> {
    this.#running ??= this.#sweep()
      .catch((error: unknown) => {
        this.#log.warn('the retention sweep failed; the next one tries again', { err: error })
        return 0
      })
      .finally(() => {
        this.#running = null
      })
    return this.#running
  }

  async #sweep(): Promise<number> {
    const days = this.#settings.runEventsDays
    if (days === undefined) return 0
    const endedBefore = new Date(Date.now() - days * 86_400_000)
    let deleted = 0
    for (;;) {
      const batch = await this.#store.transaction(async (tx) =>
        (await lockRetentionSweep(tx)) ? deleteOldRunEvents(tx, endedBefore, 5_000) : -1,
      )
      if (batch <= 0) break
      deleted += batch
      if (batch < 5_000) break
    }
    if (deleted > 0)
      this.#log.info(`retention: deleted ${deleted} events of runs ended over ${days} days ago`, { deleted })
    return deleted
  }
}
