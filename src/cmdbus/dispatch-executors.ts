import { randomUUID } from 'node:crypto'
import type { PluginLogger } from '../extension/index.js'
import {
  dispatchExecution,
  findApprovedUnstarted,
  findOrphanedDispatches,
  getDecision,
  lastAuditEnvelope,
  lockDispatch,
  lockRunOf,
  renewDispatchExecutor,
  type DispatchRecord,
  type Executor,
  type Store,
} from '../store/index.js'
import { recordStep, type AuditEnvelope } from './audit-envelope.js'
import type { DispatchOutcome } from './bus-types.js'

/** How an ended orphan reaches the run that waits for it (a command a human approved). */
export interface OrphanHooks {
  /** Records the interrupted outcome where it is awaited, in the same transaction. */
  settle(tx: Executor, orphan: DispatchRecord, outcome: DispatchOutcome): Promise<void>
}

/**
 * This process's claim on the dispatches it is running: each `running` dispatch records the process
 * and a lease, renewed while any of them runs. A crash stops the renewals; the sweep then ends those
 * dispatches `interrupted` instead of leaving them (and their Idempotency-Key) running for ever.
 */
export class DispatchExecutors {
  readonly id = randomUUID()
  readonly #store: Store
  readonly #leaseMs: number
  readonly #log: PluginLogger
  #running = 0
  #timer: NodeJS.Timeout | undefined

  constructor(store: Store, log: PluginLogger, leaseMs = 30_000) {
    this.#store = store
    this.#log = log
    this.#leaseMs = leaseMs
  }

  /** The executor a dispatch starting now records. */
  claim(): { id: string; expiresAt: Date } {
    return { id: this.id, expiresAt: new Date(Date.now() + this.#leaseMs) }
  }

  /** Counts a dispatch as running here (renewals run while any does). */
  started(): void {
    if (this.#running++ > 0) return
    this.#timer = setInterval(
      () => {
        renewDispatchExecutor(this.#store, this.id, new Date(Date.now() + this.#leaseMs)).catch((error: unknown) =>
          this.#log.warn('could not renew the lease of running dispatches', { err: error }),
        )
      },
      Math.max(200, Math.floor(this.#leaseMs / 3)),
    )
    this.#timer.unref()
  }

  finished(): void {
    if (--this.#running > 0) return
    this.#running = 0
    clearInterval(this.#timer)
    this.#timer = undefined
  }

  /**
   * Ends orphaned dispatches `interrupted`, each with its audit entry: those whose executor's lease
   * has passed, or (`all`, on a database only this process uses) every one another process left running.
   */
  async sweep(options: { all: boolean }, hooks?: OrphanHooks): Promise<DispatchRecord[]> {
    const ended: DispatchRecord[] = []
    const before = new Date(Date.now() - this.#leaseMs)
    const orphans = [
      ...(await findOrphanedDispatches(this.#store, { all: options.all, except: this.id })),
      ...(await findApprovedUnstarted(this.#store, { all: options.all, before })),
    ]
    for (const orphan of orphans) {
      const done = await this.#store.transaction(async (tx) => {
        await lockRunOf(tx, orphan)
        // Re-checked under the row lock: its executor may have finished it (or renewed) meanwhile.
        const current = await lockDispatch(tx, orphan.id)
        const message = current && (await this.#orphaned(tx, current, options.all, before))
        if (!current || !message) return false
        const envelope = ((await lastAuditEnvelope(tx, current.id)) ?? {}) as AuditEnvelope
        const error = { code: 'interrupted', message }
        await recordStep(tx, 'interrupted', envelope, current, {
          status: 'failed',
          error,
          finishedAt: new Date().toISOString(),
        })
        await hooks?.settle(tx, current, {
          status: 'failed',
          dispatchId: current.id,
          error: { code: 'interrupted', message },
        })
        return true
      })
      if (done) ended.push(orphan)
    }
    if (ended.length > 0)
      this.#log.warn(
        `ended ${ended.length} dispatches a stopped server left running or approved but unstarted (interrupted)`,
        { ended: ended.length },
      )
    return ended
  }

  /** Why a locked dispatch counts as orphaned (what its `interrupted` error says), or null when it does not. */
  async #orphaned(tx: Executor, current: DispatchRecord, all: boolean, before: Date): Promise<string | null> {
    const row = await dispatchExecution(tx, current.id)
    if (!row) return null
    if (current.status === 'running') {
      const expired = !row.executorExpiresAt || row.executorExpiresAt.getTime() < Date.now()
      return (all ? row.executor !== this.id : expired)
        ? 'the server stopped while the command ran; whether it took effect is unknown'
        : null
    }
    if (current.status === 'awaiting_decision' && current.decisionId) {
      const decision = await getDecision(tx, current.decisionId)
      if (decision?.status !== 'approved' || (!all && row.updatedAt.getTime() >= before.getTime())) return null
      return 'the server stopped after the approval, before the command started: it did not run (call it again to be asked again)'
    }
    return null
  }
}
