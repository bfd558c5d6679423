import type { CommandBus, DecisionView, DispatchOutcome, RunBinding } from '../cmdbus/index.js'
import type { PluginLogger } from '../extension/index.js'
import {
  getRun,
  listToolCalls,
  lockRun,
  pendingDecisionIds,
  terminalRunStatuses,
  waitForLess,
  type Executor,
  type Store,
} from '../store/index.js'
import type { DriverPool } from './driver-pool.js'
import type { RunLedger } from './run-ledger.js'
import type { RunWriter } from './run-writer.js'

/**
 * The runs behind the bus's decisions (the bus's RunBinding): a decision about one of a run's calls
 * is written to the run's tool-call ledger inside the bus's transaction that records it, so an
 * executed call can never end up marked otherwise; once it commits, the run continues.
 */
export class RunDecisions implements RunBinding {
  readonly #store: Store
  readonly #ledger: RunLedger
  readonly #pool: DriverPool
  readonly #writer: RunWriter

  constructor(deps: { store: Store; ledger: RunLedger; pool: DriverPool; writer: RunWriter }) {
    this.#store = deps.store
    this.#ledger = deps.ledger
    this.#pool = deps.pool
    this.#writer = deps.writer
  }

  /**
   * A decision's outcome (null: it expired) for the run's call. A decision that expired while its
   * run waited ends the run `expired` (docs/architecture.md#run-states).
   */
  async settle(tx: Executor, decision: DecisionView, outcome: DispatchOutcome | null): Promise<void> {
    const runId = decision.runId!
    const run = await lockRun(tx, runId)
    if (!run || terminalRunStatuses.includes(run.status)) return
    const call = (await listToolCalls(tx, runId)).find((candidate) => candidate.decisionId === decision.id)
    if (!call || call.status !== 'awaiting_decision') return
    if (decision.status === 'expired' || !outcome) {
      if (run.status === 'requires_action') {
        await this.#ledger.end(tx, run, { status: 'expired', openCalls: 'expired' })
        return
      }
      await this.#ledger.finish(tx, run, call, 'expired', { accepted: false, expired: true })
    } else if (decision.status === 'rejected') {
      await this.#ledger.finish(tx, run, call, 'rejected', { accepted: false, rejected: true })
    } else {
      await this.#ledger.applyOutcome(tx, run, call, outcome)
    }
    if (run.status === 'requires_action') await waitForLess(tx, runId)
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
