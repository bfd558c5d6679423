import type { JsonValue } from '../extension/index.js'
import {
  appendEventsAfter,
  fenceRun,
  insertToolMessageQuery,
  LeaseLost,
  runEvent,
  toolCallStartedWithDispatch,
  updateToolCall,
  updateToolCallQuery,
  type CarriedResult,
  type CarriedTransition,
  type DispatchStartPart,
  type Executor,
  type FencedPart,
  type Store,
} from '../store/index.js'
import { answerAfterFence, callAnswer, outcomeAnswer, type CallAnswer, type CallRun } from './call-answer.js'
import type { DispatchHooks, DispatchOutcome } from './bus-types.js'

/** What the bus needs to write a driven call's part of the ledger: data, no callbacks. */
export interface RunCall {
  run: CallRun
  callId: string
  /** The driver's lease: every write of the call goes only while it holds; each renews it for `ms`. */
  lease: { owner: string; ms: number }
  /** At most this many bytes of a result go to the model (PLINTH_TOOL_OUTPUT_LIMIT). */
  toolOutputLimit: number
  /** The command's own rendering of an ok result (`modelText`). */
  modelText?: ((result: JsonValue) => string) | undefined
  /** When the call started (`performance.now()`), for `tool_call.completed.durationMs`. */
  startedAt: number
  /**
   * The run's next step (the next round's opening), written with the call's answer when the call is
   * answered now (not when it waits for a decision): one statement instead of two.
   */
  then?: CarriedTransition
  /** The tool message's id: made before `then` was, so that it sorts before the next round's message. */
  messageId?: string
  /** Once aborted (the run is being stopped), `then` is left out: no round is opened to be closed at once. */
  until?: AbortSignal
}

/**
 * A model tool call dispatched by its run's driver (docs/architecture.md#the-command-bus): the bus writes
 * the call's part of the ledger with the dispatch's own rows, fenced by the driver's lease — `running`
 * with the dispatch row (a driver that lost the lease dispatches nothing), the result (or the wait for
 * a decision) with the outcome (a driver that lost it meanwhile records nothing: the run's new owner,
 * or whoever ended it, answers the call). The driver builds it from data and passes it as the request's
 * `driven`; it calls nothing of the run manager's, and the driver reads `recorded` and `lost` after.
 */
export class DrivenCall implements DispatchHooks {
  readonly #store: Store
  readonly #run: CallRun
  readonly #callId: string
  readonly #call: RunCall
  /** Whether the current transaction's fence held. */
  #fenced = false
  /** Whether the outcome was recorded with the call's part (a replayed outcome records none). */
  recorded = false
  /** Whether the fence failed when the outcome was to be recorded (the driver must stop). */
  lost = false
  /** What `then` wrote and read, when it was written with the answer. */
  carried: CarriedResult | undefined

  constructor(store: Store, call: RunCall) {
    this.#store = store
    this.#call = call
    this.#run = call.run
    this.#callId = call.callId
  }

  #fence() {
    return { runId: this.#run.id, owner: this.#call.lease.owner, expiresAt: new Date(Date.now() + this.#call.lease.ms) }
  }

  #answer(outcome: DispatchOutcome): CallAnswer | undefined {
    const answer = outcomeAnswer(outcome)
    if (!answer) return undefined
    return callAnswer(this.#run, this.#callId, answer.status, answer.output, {
      modelText: this.#call.modelText,
      limitBytes: this.#call.toolOutputLimit,
      durationMs: Math.round(performance.now() - this.#call.startedAt),
      dispatchId: outcome.dispatchId,
    })
  }

  /** Each of the dispatch's transactions fences the run first (before the bus's audit and event locks). */
  async lock(tx: Executor): Promise<void> {
    const fence = this.#fence()
    this.#fenced = (await fenceRun(tx, fence.runId, fence.owner, fence.expiresAt)) !== undefined
  }

  /**
   * Written before running only when the call does not run now (refused, or waiting for a person): it
   * has not started, so no `running` and no `tool_call.started` (that comes when it runs).
   */
  async persisted(): Promise<void> {
    if (!this.#fenced) throw new LeaseLost()
  }

  /** The outcome (a refusal, or the wait for a decision) in the transaction that records it. */
  async settled(tx: Executor, outcome: DispatchOutcome): Promise<void> {
    this.recorded = true
    if (!this.#fenced) {
      this.lost = true
      return
    }
    if (outcome.status === 'awaiting_decision') {
      await updateToolCall(tx, this.#callId, {
        status: 'awaiting_decision',
        dispatchId: outcome.dispatchId,
        decisionId: outcome.decision.id,
      })
      return
    }
    const answer = this.#answer(outcome)
    if (!answer) return
    // The ledger row, the tool message and the event: one statement.
    await appendEventsAfter(
      tx,
      [
        updateToolCallQuery(tx, this.#callId, answer.row),
        insertToolMessageQuery(tx, this.#run, this.#callId, answer.text, undefined, answer.parts),
      ],
      [answer.event],
    )
  }

  /** The dispatch's row and first entries, the call `running` and its event: one statement, fenced. */
  startTogether(): DispatchStartPart & { lost(): Error } {
    return {
      fence: this.#fence(),
      writes: [toolCallStartedWithDispatch(this.#store, this.#callId)],
      events: [runEvent(this.#run, 'tool_call.started', { callId: this.#callId })],
      lost: () => new LeaseLost(),
    }
  }

  /** The result and the dispatch's last step in one statement, under the run's fence. */
  finishTogether(
    outcome: DispatchOutcome,
  ): (FencedPart & { written(result: { fenced: boolean; then?: CarriedResult }): void }) | undefined {
    const answer = this.#answer(outcome)
    if (!answer) return undefined
    const then = this.#call.until?.aborted ? undefined : this.#call.then
    return {
      fence: this.#fence(),
      ...answerAfterFence(this.#store, this.#run, this.#callId, answer, this.#call.messageId),
      ...(then && { then }),
      written: ({ fenced, then: carried }) => {
        this.recorded = true
        if (!fenced) this.lost = true
        this.carried = carried
      },
    }
  }
}
