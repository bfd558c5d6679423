import {
  announceRunEnded,
  listToolCalls,
  lockRun,
  lockRunOf,
  terminalRunStatuses,
  waitForLess,
  type DecisionRecord,
  type Executor,
} from '../store/index.js'
import type { DispatchHooks, DispatchOutcome } from './bus-types.js'
import { outcomeAnswer } from './call-answer.js'
import type { CallLedger } from './call-ledger.js'

/**
 * The bus's one door into the runs (docs/architecture.md#the-tool-call-ledger): a decision's outcome is
 * written to its run's tool-call ledger inside the same transaction that records it on the dispatch, so
 * a crash cannot leave an executed call marked otherwise. Answering, expiring and the orphan sweep settle
 * through it, and an approved dispatch's steps get their run part from it (`approved`). It writes through
 * the run manager's `CallLedger` (bound when the run manager starts; until then there are no runs to
 * settle) and the store's transitions, and calls nothing of the run manager's.
 */
export class RunSettlement {
  #ledger: CallLedger | null = null

  bind(ledger: CallLedger | null): void {
    this.#ledger = ledger
  }

  /**
   * A decision's outcome (null: it expired) for its run's call, inside the caller's transaction. A
   * decision that expired while its run waited ends the run `expired` (docs/architecture.md#run-states).
   */
  async settle(tx: Executor, decision: DecisionRecord, outcome: DispatchOutcome | null): Promise<DecisionRecord[]> {
    const ledger = this.#ledger
    if (!decision.runId || !ledger) return []
    const run = await lockRun(tx, decision.runId)
    if (!run || terminalRunStatuses.includes(run.status)) return []
    const call = (await listToolCalls(tx, run.id)).find((candidate) => candidate.decisionId === decision.id)
    if (!call || call.status !== 'awaiting_decision') return []
    if (decision.status === 'expired' || !outcome) {
      // The run's end expires its other pending decisions with it (returned, for the caller to announce).
      if (run.status === 'requires_action') {
        // Announced: an approved call of the run still running stops with it.
        const expired = await ledger.end(tx, run, { status: 'expired', openCalls: 'expired' })
        await announceRunEnded(tx, run.id)
        return expired
      }
      await ledger.finish(tx, run, call, 'expired', { accepted: false, expired: true })
    } else if (decision.status === 'rejected') {
      // A person who answered in the call's place: their text is the call's result.
      const reply = decision.reply
      await ledger.finish(
        tx,
        run,
        call,
        'rejected',
        reply?.kind === 'respond' ? { accepted: false, response: reply.text } : { accepted: false, rejected: true },
      )
    } else if (decision.reply?.kind === 'edit') {
      // The model is told the call ran with the person's params, not its own.
      const answer = outcomeAnswer(outcome)
      if (answer)
        await ledger.finish(
          tx,
          run,
          call,
          answer.status,
          { editedByPerson: true, ranWith: decision.reply.params, outcome: answer.output },
          { dispatchId: outcome.dispatchId },
        )
    } else {
      await ledger.applyOutcome(tx, run, call, outcome)
    }
    if (run.status === 'requires_action') await waitForLess(tx, run.id)
    return []
  }

  /** What goes with each step of a dispatch a person approved, for the run that waits for it. */
  approved(decision: DecisionRecord): DispatchHooks {
    return new ApprovedCall(this, decision)
  }
}

/**
 * An approved dispatch's run part: the run's row locked first in each transaction, the outcome settled
 * with the last step.
 */
class ApprovedCall implements DispatchHooks {
  readonly #runs: RunSettlement
  readonly #decision: DecisionRecord

  constructor(runs: RunSettlement, decision: DecisionRecord) {
    this.#runs = runs
    this.#decision = decision
  }

  async lock(tx: Executor): Promise<void> {
    await lockRunOf(tx, this.#decision)
  }

  async settled(tx: Executor, outcome: DispatchOutcome): Promise<void> {
    await this.#runs.settle(tx, this.#decision, outcome)
  }
}
