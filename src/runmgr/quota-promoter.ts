import type { PluginLogger } from '../extension/index.js'
import {
  lockQuotaPromotion,
  quotaCandidates,
  quotaCountsFor,
  startQuotaQueuedRun,
  type Run,
  type Store,
} from '../store/index.js'
import type { DriverPool } from './driver-pool.js'
import type { LeaseClock } from './leases.js'
import type { RunQuotas } from './run-quotas.js'

export interface QuotaPromoterDeps {
  store: Store
  log: PluginLogger
  quotas: RunQuotas
  pool: DriverPool
  leases: LeaseClock
}

/**
 * Queue mode of the run quotas (docs/guides/operating.md#run-quotas): starts the runs waiting for a
 * quota, oldest first, as room frees — when a run ends anywhere, and every second (a minute's window
 * moves on by itself). Every instance runs one; a lock in the database lets one promote at a time, so
 * two cannot both fill the last slot.
 */
export class QuotaPromoter {
  readonly #deps: QuotaPromoterDeps
  #timer: NodeJS.Timeout | undefined
  #running: Promise<void> | null = null
  #again = false

  constructor(deps: QuotaPromoterDeps) {
    this.#deps = deps
  }

  start(intervalMs = 1000): void {
    this.#timer = setInterval(() => void this.poke(), intervalMs)
    this.#timer.unref()
  }

  stop(): void {
    clearInterval(this.#timer)
    this.#timer = undefined
  }

  /**
   * Looks for room now (overlapping calls share one pass, and one more follows). Resolves when the
   * pass in flight, or the one this call starts, has ended.
   */
  poke(): Promise<void> {
    if (this.#running) {
      this.#again = true
      return this.#running
    }
    this.#running = this.#promote()
      .catch((error: unknown) =>
        this.#deps.log.warn('starting runs waiting for a quota failed; trying again', { err: error }),
      )
      .finally(() => {
        this.#running = null
        if (this.#again) {
          this.#again = false
          void this.poke()
        }
      })
    return this.#running
  }

  async #promote(): Promise<void> {
    const { store, quotas, leases, pool } = this.#deps
    const started = await store.transaction(async (tx) => {
      if (!(await lockQuotaPromotion(tx))) return []
      const runs: Array<{ run: Run; owner: string }> = []
      // A user or project found full stays full for the rest of this pass: each count is read afresh,
      // and a run that ended between two reads would otherwise let a later run start before the
      // older one skipped just before it.
      const full = new Set<string>()
      for (const candidate of await quotaCandidates(tx, 50)) {
        const { ownerId, projectId } = candidate.run
        if (full.has(`user:${ownerId}`) || full.has(`project:${projectId}`)) continue
        const over = quotas.full(await quotaCountsFor(tx, candidate.run), candidate.quota)
        if (over) {
          full.add(over.quota.scope === 'user' ? `user:${ownerId}` : `project:${projectId}`)
          continue
        }
        const lease = leases.newLease()
        const run = await startQuotaQueuedRun(tx, candidate.run.id, lease)
        if (run) runs.push({ run, owner: lease.owner })
      }
      return runs
    })
    for (const { run, owner } of started) pool.spawn(run.id, owner, { run })
  }
}
