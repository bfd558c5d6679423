import type { DispatchHooks, DispatchOutcome } from '../cmdbus/index.js'
import {
  fenceRun,
  runEvent,
  toolCallStartedWithDispatch,
  updateToolCall,
  type DispatchStartPart,
  type Executor,
  type FencedPart,
  type Run,
  type RunFence,
  type ToolCallRecord,
} from '../store/index.js'
import type { DriverKit } from './driver-kit.js'
import { LeaseLost } from './leases.js'

/**
 * One model tool call's part in its command's dispatch (the bus's `within` hooks): the call's own
 * writes ride in the dispatch's transactions, fenced by the run's lease — `running` with the dispatch
 * row (a driver that lost the lease dispatches nothing), the result (or the wait for a decision) with
 * the dispatch's outcome (a driver that lost it meanwhile records nothing: the run's new owner, or
 * whoever ended it, has answered the call).
 */
export class CallDispatch implements DispatchHooks {
  readonly #kit: DriverKit
  readonly #fence: RunFence
  readonly #run: Run
  readonly #call: ToolCallRecord
  /** The run as the current transaction's fence found it (undefined: the lease has passed). */
  #locked: Run | undefined
  /** Whether the outcome was recorded by one of these hooks (a replayed outcome runs none). */
  recorded = false
  /** Whether the fence failed when the outcome was to be recorded. */
  lost = false

  constructor(kit: DriverKit, fence: RunFence, run: Run, call: ToolCallRecord) {
    this.#kit = kit
    this.#fence = fence
    this.#run = run
    this.#call = call
  }

  /** Each of the dispatch's transactions fences the run first (before the bus's audit and event locks). */
  async lock(tx: Executor): Promise<void> {
    this.#locked = await fenceRun(tx, this.#fence.runId, this.#fence.owner, this.#kit.leases.expiry())
  }

  /**
   * Written before running only when the call does not run now (refused, or waiting for a person): it
   * has not started, so no `running` and no `tool_call.started` (that comes when it runs).
   */
  async persisted(): Promise<void> {
    if (!this.#locked) throw new LeaseLost()
  }

  /** The outcome (a result, a failure, or the wait for a decision) in the transaction that records it. */
  async settled(tx: Executor, outcome: DispatchOutcome): Promise<void> {
    this.recorded = true
    if (!this.#locked) {
      this.lost = true
      return
    }
    if (outcome.status === 'awaiting_decision') {
      await updateToolCall(tx, this.#call.id, {
        status: 'awaiting_decision',
        dispatchId: outcome.dispatchId,
        decisionId: outcome.decision.id,
      })
    } else {
      await this.#kit.ledger.applyOutcome(tx, this.#locked, this.#call, outcome)
    }
  }

  /** The dispatch's row and first entries, the call `running` and its event: one statement, fenced. */
  startTogether(): DispatchStartPart & { lost(): Error } {
    return {
      fence: { ...this.#fence, expiresAt: this.#kit.leases.expiry() },
      writes: [toolCallStartedWithDispatch(this.#kit.store, this.#call.id)],
      events: [runEvent(this.#run, 'tool_call.started', { callId: this.#call.id })],
      lost: () => new LeaseLost(),
    }
  }

  /** The result and the dispatch's last step in one statement, under the run's fence. */
  finishTogether(outcome: DispatchOutcome): (FencedPart & { written(fenced: boolean): void }) | undefined {
    const part = this.#kit.ledger.outcomePart(this.#kit.store, this.#run, this.#call, outcome)
    if (!part) return undefined
    return {
      fence: { ...this.#fence, expiresAt: this.#kit.leases.expiry() },
      ...part,
      written: (fenced) => this.written(fenced),
    }
  }

  /** Whether the fence held for the finishing statement. */
  written(fenced: boolean): void {
    this.recorded = true
    if (!fenced) this.lost = true
  }

  /** A replayed outcome (the dispatch already existed) ran no hook: record it now, fenced. */
  async recordReplayed(outcome: DispatchOutcome): Promise<void> {
    if (this.recorded) return
    await this.#kit.store.transaction(async (tx) => {
      await this.lock(tx)
      await this.settled(tx, outcome)
    })
  }
}
