import type { CommandBus } from '../cmdbus/index.js'
import type { PluginLogger } from '../extension/index.js'
import {
  findAnsweredWaitingRuns,
  findRunsWaitingSince,
  findRunsWithExpiredLease,
  findStartableQueues,
  takeOver,
  type Store,
} from '../store/index.js'
import type { DriverPool } from './driver-pool.js'
import type { LeaseClock } from './leases.js'
import type { RunWriter } from './run-writer.js'

/** The sweeper's collaborators. */
export interface SweeperDeps {
  store: Store
  bus: CommandBus
  log: PluginLogger
  leases: LeaseClock
  /** Starts, and knows, the runs this process drives. */
  pool: DriverPool
  writer: RunWriter
  /** Resumes after which a run taken over ends `failed` instead (default 3). */
  maxResumes: number | undefined
  /** How long a run may wait for decisions or the client (PLINTH_ACTION_TTL). */
  actionTtlMs: number | undefined
}

/**
 * The run manager's sweeper: at start and then periodically it ends dispatches a stopped process
 * left running, takes over runs whose driver stopped, starts queues nobody started, continues
 * waiting runs whose calls are answered and expires those that waited too long.
 */
export class RunSweeper {
  readonly #deps: SweeperDeps
  #timer: NodeJS.Timeout | null = null

  constructor(deps: SweeperDeps) {
    this.#deps = deps
  }

  /** Sweeps every `intervalMs` from now on. */
  start(intervalMs: number): void {
    this.#timer = setInterval(() => void this.#sweepOnce(), intervalMs)
    this.#timer.unref()
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer)
    this.#timer = null
  }

  /**
   * Recovers what stopped drivers left behind: a running run whose lease has passed (its process
   * died, or shut down and released it) is taken over and resumed from its last checkpoint — no
   * completed tool call runs again — until it has been resumed `maxResumes` times after a lease ran
   * out (a released lease is not counted), when it ends
   * failed `interrupted`. Also starts queues nobody started, continues waiting runs whose every call
   * is answered, and expires runs left waiting past their deadline.
   */
  async sweep(options: { orphansOnly?: boolean } = {}): Promise<{ resumed: number; failed: number }> {
    const { store, pool } = this.#deps
    const counts = { resumed: 0, failed: 0 }
    if (pool.stopping) return counts
    // With an exclusive database every running run not driven here is an orphan, whatever its lease says.
    const before = options.orphansOnly ? new Date(Date.UTC(9999, 0, 1)) : new Date()
    for (const run of await findRunsWithExpiredLease(store, before)) {
      if (pool.isDriven(run.id) || pool.stopping) continue
      const taken = await this.#takeOver(run.id, before)
      if (taken) counts[taken]++
    }
    for (const run of await findAnsweredWaitingRuns(store)) await pool.resumeIfAnswered(run.id)
    for (const conversationId of await findStartableQueues(store)) await pool.startNext(conversationId)
    const ttl = this.#deps.actionTtlMs ?? 24 * 3_600_000
    for (const run of await findRunsWaitingSince(store, new Date(Date.now() - ttl))) {
      // Announced: what still runs on the run's behalf (an approved call of it) stops with it.
      await this.#deps.writer.end(run.id, { status: 'expired', openCalls: 'expired' }, { announce: true })
      await pool.startNext(run.conversationId)
    }
    await this.#deps.bus.expireOverdue()
    return counts
  }

  /** Takes over a run whose driver stopped; re-checks the lease under the row lock. */
  async #takeOver(runId: string, before: Date): Promise<'resumed' | 'failed' | undefined> {
    const lease = this.#deps.leases.newLease()
    const taken = await takeOver(this.#deps.store, runId, lease, before)
    if (!taken) return undefined
    const fence = { runId, owner: lease.owner }
    if (taken.resumes > (this.#deps.maxResumes ?? 3)) {
      const message = `the run was interrupted ${taken.resumes} times (its server died while driving it) and is not resumed again`
      await this.#deps.writer.end(
        runId,
        { status: 'failed', error: { code: 'interrupted', message }, openCalls: 'interrupted' },
        { fence },
      )
      await this.#deps.pool.startNext(taken.conversationId)
      return 'failed'
    }
    this.#deps.pool.spawn(runId, lease.owner, { resumed: true })
    return 'resumed'
  }

  /** One pass of the periodic sweeper: orphaned dispatches, then runs. Failures are logged, and it tries again. */
  async #sweepOnce(): Promise<void> {
    try {
      await this.#deps.bus.sweepOrphanedDispatches({ all: false })
      const swept = await this.sweep()
      if (swept.resumed + swept.failed > 0)
        this.#deps.log.info(`recovered ${swept.resumed + swept.failed} runs`, {
          resumed: swept.resumed,
          failed: swept.failed,
        })
      if (swept.failed > 0)
        this.#deps.log.warn(`ended ${swept.failed} runs that could not resume`, { failed: swept.failed })
    } catch (error) {
      this.#deps.log.warn('the run sweeper failed; it tries again', { err: error })
    }
  }
}
