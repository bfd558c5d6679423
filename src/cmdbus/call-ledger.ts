import type { JsonValue } from '../extension/index.js'
import {
  appendEventsAfter,
  closeStreamingMessages,
  endRun,
  insertToolMessageQuery,
  listToolCalls,
  openToolCallStatuses,
  runEndedEvents,
  updateToolCallQuery,
  type DecisionRecord,
  type Executor,
  type NewEvent,
  type Run,
  type RunEnding,
  type ToolCallRecord,
  type ToolCallStatus,
} from '../store/index.js'
import type { DispatchOutcome } from './bus-types.js'
import { callAnswer, outcomeAnswer, type CallAnswer } from './call-answer.js'
import { auditBudgetStop, auditClientCall, type ClientCallAudit } from './client-call-audit.js'
import type { CommandCatalog } from './command-catalog.js'
import { expirePendingDecision } from './decision-expiry.js'

/** How a run ends, and what its open calls get. */
export interface RunEnd extends RunEnding {
  /** The result open calls get; `error` carries the run's error code. */
  openCalls?: 'cancelled' | 'interrupted' | 'expired' | 'error'
  /** The caller knows nothing is open or streaming (it just completed the last turn): skip looking. */
  clean?: boolean
}

/** Told about the calls the ledger answers and the runs it ends, for metrics. Must not throw. */
export interface LedgerObserver {
  toolCall?(figures: { status: string }): void
  runEnded?(figures: { status: string; durationMs: number | null }): void
}

export interface CallLedgerOptions {
  catalog: CommandCatalog
  /** At most this many bytes of a result go to the model (PLINTH_TOOL_OUTPUT_LIMIT). */
  toolOutputLimit: number
  observer?: LedgerObserver | undefined
}

/**
 * The tool-call ledger's writes (docs/architecture.md#the-tool-call-ledger): every call gets exactly one
 * terminal result, written with its tool message and event in the caller's transaction (the one that
 * also changes the run's state). The run manager and the bus (a decided call's outcome) both write
 * through it; the run's own state changes are the store's transitions.
 */
export class CallLedger {
  /** When each call started, for `tool_call.completed.durationMs` (in memory: only this process times it). */
  readonly #callStarts = new Map<string, number>()

  readonly #catalog: CommandCatalog
  readonly #toolOutputLimit: number
  readonly #observer: LedgerObserver | undefined

  constructor(options: CallLedgerOptions) {
    this.#catalog = options.catalog
    this.#toolOutputLimit = options.toolOutputLimit
    this.#observer = options.observer
  }

  /** At most this many bytes of a result go to the model (PLINTH_TOOL_OUTPUT_LIMIT). */
  get toolOutputLimit(): number {
    return this.#toolOutputLimit
  }

  started(callId: string): void {
    this.#callStarts.set(callId, performance.now())
  }

  /** Writes a call's one terminal result: ledger row, tool message and event. */
  async finish(
    tx: Executor,
    run: Run,
    call: ToolCallRecord,
    status: ToolCallStatus,
    output: JsonValue,
    extra: { dispatchId?: string | null; repeatOf?: string; auditError?: { code: string; message: string } } = {},
  ): Promise<void> {
    const result = this.#result(run, call, status, output, extra)
    const writes = [
      updateToolCallQuery(tx, call.id, result.row),
      insertToolMessageQuery(tx, run, call.id, result.text, undefined, result.parts),
    ]
    // A client call's audit row ends with its ledger result (the audit chain's lock before the event log's).
    if (call.kind === 'client')
      await auditClientCall(tx, clientCallAudit(run, call), {
        status,
        output,
        ...(extra.auditError && { error: extra.auditError }),
      })
    // The ledger row, the tool message and the event: one statement.
    await appendEventsAfter(tx, writes, [result.event])
  }

  /** A dispatch's outcome as the call's result. */
  async applyOutcome(tx: Executor, run: Run, call: ToolCallRecord, outcome: DispatchOutcome): Promise<void> {
    const answer = outcomeAnswer(outcome)
    if (answer) await this.finish(tx, run, call, answer.status, answer.output, { dispatchId: outcome.dispatchId })
  }

  /** The bus wrote a call's result with its dispatch (a `DrivenCall`): counted, and its timing dropped. */
  answered(callId: string, outcome: DispatchOutcome): void {
    const answer = outcomeAnswer(outcome)
    if (!answer) return
    this.#callStarts.delete(callId)
    this.#observer?.toolCall?.({ status: answer.status })
  }

  /** A terminal result's ledger row, the text the model reads, and its event. */
  #result(
    run: Run,
    call: ToolCallRecord,
    status: ToolCallStatus,
    output: JsonValue,
    extra: { dispatchId?: string | null; repeatOf?: string },
  ): CallAnswer {
    this.#observer?.toolCall?.({ status })
    const started = this.#callStarts.get(call.id)
    this.#callStarts.delete(call.id)
    return callAnswer(run, call.id, status, output, {
      modelText: call.commandId ? this.#catalog.get(call.commandId)?.modelText : undefined,
      limitBytes: this.#toolOutputLimit,
      durationMs: started === undefined ? null : Math.round(performance.now() - started),
      ...extra,
    })
  }

  /**
   * Ends a run the caller has locked (or fenced): every open call gets its terminal result, a turn
   * still streaming is closed, then the store's `endRun` writes the terminal state and its events.
   * Returns the pending decisions it expired, for the caller to announce once the transaction commits.
   */
  async end(tx: Executor, run: Run, end: RunEnd): Promise<DecisionRecord[]> {
    const decisions: DecisionRecord[] = []
    const open = end.clean
      ? []
      : (await listToolCalls(tx, run.id)).filter((call) => openToolCallStatuses.includes(call.status))
    // Pending decisions expire first: their `decision.resolved` precedes the run's terminal event, after
    // which the run's stream closes (and the audit chain is appended to before the event log).
    for (const call of open) {
      const expired = call.decisionId
        ? await expirePendingDecision(tx, call.decisionId, {
            cancelled: end.status === 'cancelled',
            message: `the run ended (${end.reason ?? end.status}) before anyone answered`,
          })
        : undefined
      if (expired) decisions.push(expired)
    }
    for (const call of open) {
      const status = end.openCalls ?? 'cancelled'
      const code = status === 'error' ? String(end.error?.code ?? 'error') : status
      const output: JsonValue =
        call.kind === 'client'
          ? { accepted: false, [code]: true }
          : {
              error: {
                code,
                message: `the run ended (${end.reason ?? (status === 'error' ? code : end.status)}) before this call finished`,
              },
            }
      await this.finish(tx, run, call, status, output)
    }
    // A turn that was streaming when the run ended (a crash, a cancel elsewhere) is closed, not left streaming.
    if (!end.clean) await closeStreamingMessages(tx, run, end.status === 'cancelled' ? 'cancelled' : 'interrupted')
    // A budget stop is in the audit chain (the audit lock, taken by the caller, before the event log's).
    if (end.error?.code === 'budget_exceeded')
      await auditBudgetStop(
        tx,
        {
          runId: run.id,
          ownerId: run.ownerId,
          projectId: run.projectId,
          conversationId: run.conversationId,
          modelCalls: run.usage.modelCalls,
        },
        { ...end.error, code: 'budget_exceeded', message: String(end.error.message ?? 'the run’s budget is spent') },
      )
    const ended = await endRun(tx, run.id, ending(end))
    this.#observeEnd(ended, end)
    return decisions
  }

  /** The events that announce a run's end, for a fence that carries `endPatch` (the observer is told). */
  ended(run: Run, end: RunEnd): NewEvent[] {
    this.#observeEnd(run, end)
    return runEndedEvents(run, ending(end))
  }

  #observeEnd(run: Run, end: RunEnd): void {
    this.#observer?.runEnded?.({
      status: end.status,
      durationMs: run.startedAt ? Date.now() - Date.parse(run.startedAt) : null,
    })
  }
}

/** The run's terminal state of a `RunEnd` (without what its open calls get). */
function ending(end: RunEnd): RunEnding {
  return {
    status: end.status,
    ...(end.reason !== undefined && { reason: end.reason }),
    ...(end.error !== undefined && { error: end.error }),
    ...(end.usage !== undefined && { usage: end.usage }),
    ...(end.output !== undefined && { output: end.output }),
  }
}

/** A client tool call as its audit row describes it. */
export function clientCallAudit(run: Run, call: ToolCallRecord): ClientCallAudit {
  return {
    runId: run.id,
    callId: call.id,
    name: call.name,
    args: call.args,
    ownerId: run.ownerId,
    projectId: run.projectId,
    conversationId: run.conversationId,
    risk: call.risk,
  }
}
