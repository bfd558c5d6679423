import type { CommandBus } from '../cmdbus/index.js'
import type { PluginLogger } from '../extension/index.js'
import { getRun, pendingDecisionIds, terminalRunStatuses, type Store } from '../store/index.js'
import type { DriverPool } from './driver-pool.js'
import type { RunWriter } from './run-writer.js'

/**
 * What follows a decision about one of a run's calls, once the bus has committed it (the bus wrote
 * the outcome to the run's ledger in that transaction, through the `CallLedger`): the run continues
 * when nothing is awaited any more, or its queue moves on when the decision ended it.
 */
export class RunDecisions {
  readonly #store: Store
  readonly #pool: DriverPool
  readonly #writer: RunWriter

  constructor(deps: { store: Store; pool: DriverPool; writer: RunWriter }) {
    this.#store = deps.store
    this.#pool = deps.pool
    this.#writer = deps.writer
  }

  /** After a decision committed: continue the run once nothing is awaited, or tidy up after it ended. */
  async afterDecision(runId: string): Promise<void> {
    const run = await getRun(this.#store, runId)
    if (!run) return
    if (terminalRunStatuses.includes(run.status)) {
      await this.#writer.expireDecisions(await pendingDecisionIds(this.#store, runId))
      await this.#pool.startNext(run.conversationId)
      return
    }
    await this.#pool.resumeIfAnswered(runId)
  }

  /** Follows the bus's decisions; returns the unsubscribe. */
  follow(bus: CommandBus, log: PluginLogger): () => void {
    return bus.onDecisionResolved((decision) => {
      if (!decision.runId) return
      this.afterDecision(decision.runId).catch((error: unknown) =>
        log.error('could not continue a run after a decision', { runId: decision.runId, err: error }),
      )
    })
  }
}
