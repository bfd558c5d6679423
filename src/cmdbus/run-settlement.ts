import { lockRunOf, type DecisionRecord, type Executor } from '../store/index.js'
import type { DispatchHooks, DispatchOutcome, DecisionView } from './bus-types.js'
import { toDecisionView } from './outcomes.js'

/**
 * How the bus reaches the runs behind decisions (the run manager binds itself): a decision's outcome
 * is written to the run's tool-call ledger inside the same transaction that records it on the
 * dispatch, so a crash cannot leave an executed call marked otherwise. (The run's lock, its cancel
 * signal and an approved call's `tool_call.started` the bus takes from the store itself.)
 */
export interface RunBinding {
  /** Records a decision's outcome (null: it expired) for the run's call, in the bus's transaction. */
  settle(tx: Executor, decision: DecisionView, outcome: DispatchOutcome | null): Promise<void>
}

/**
 * The bus's one door into the runs (docs/architecture.md#the-tool-call-ledger): answering, expiring
 * and the orphan sweep settle a decided call's run through it, and an approved dispatch's steps get
 * their run part from it (`approved`). Until the run manager binds, there are no runs to settle.
 */
export class RunSettlement {
  #binding: RunBinding | null = null

  bind(binding: RunBinding | null): void {
    this.#binding = binding
  }

  /** A decision's outcome (null: it expired) for its run's call, inside the caller's transaction. */
  async settle(tx: Executor, decision: DecisionRecord, outcome: DispatchOutcome | null): Promise<void> {
    if (decision.runId && this.#binding) await this.#binding.settle(tx, toDecisionView(decision), outcome)
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
