import {
  callAnswer,
  outcomeAnswer,
  type CallAnswer,
  type ClientCallAudit,
  type CommandBus,
  type DispatchOutcome,
} from '../cmdbus/index.js'
import type { JsonValue } from '../extension/index.js'
import {
  appendEvents,
  appendEventsAfter,
  closeStreamingMessages,
  insertToolMessageQuery,
  listToolCalls,
  moveInto,
  openToolCallStatuses,
  runEvent,
  updateRun,
  updateToolCallQuery,
  type Executor,
  type NewEvent,
  type Run,
  type RunPatch,
  type ToolCallRecord,
  type ToolCallStatus,
} from '../store/index.js'
import type { RunObserver } from './run-observer.js'

/** How a run ends. */
export interface RunEnd {
  status: 'completed' | 'failed' | 'cancelled' | 'expired'
  reason?: string
  error?: { [key: string]: JsonValue }
  /** The result open calls get; `error` carries the run's error code. */
  openCalls?: 'cancelled' | 'interrupted' | 'expired' | 'error'
  usage?: Run['usage']
  /** The caller knows nothing is open or streaming (it just completed the last turn): skip looking. */
  clean?: boolean
}

/**
 * The tool-call ledger's writes (docs/architecture.md#the-tool-call-ledger): every call gets exactly one
 * terminal result, written with its tool message and event in the caller's transaction (the one that
 * also changes the run's state).
 */
export class RunLedger {
  /** When each call started, for `tool_call.completed.durationMs` (in memory: only this process times it). */
  readonly #callStarts = new Map<string, number>()

  readonly #bus: CommandBus
  readonly #toolOutputLimit: number
  readonly #observer: RunObserver | undefined

  constructor(bus: CommandBus, toolOutputLimit: number, observer: RunObserver | undefined) {
    this.#bus = bus
    this.#toolOutputLimit = toolOutputLimit
    this.#observer = observer
  }

  /** At most this many bytes of a result go to the model (PLINTH_TOOL_OUTPUT_MAX_BYTES). */
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
    extra: { dispatchId?: string | null; repeatOf?: string } = {},
  ): Promise<void> {
    const result = this.#result(run, call, status, output, extra)
    const writes = [updateToolCallQuery(tx, call.id, result.row), insertToolMessageQuery(tx, run, call.id, result.text)]
    // A client call's audit row ends with its ledger result (the audit chain's lock before the event log's).
    if (call.kind === 'client') await this.#bus.auditClientCall(tx, clientCallAudit(run, call), { status, output })
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
      modelText: call.commandId ? this.#bus.catalog.get(call.commandId)?.modelText : undefined,
      limitBytes: this.#toolOutputLimit,
      durationMs: started === undefined ? null : Math.round(performance.now() - started),
      ...extra,
    })
  }

  /**
   * Ends a run the caller has locked (or fenced): every open call gets its terminal result, a turn
   * still streaming is closed, the terminal state and events are written. Returns the decisions to
   * expire once the transaction commits.
   */
  async end(tx: Executor, run: Run, end: RunEnd): Promise<string[]> {
    const decisions: string[] = []
    for (const call of end.clean ? [] : await listToolCalls(tx, run.id)) {
      if (!openToolCallStatuses.includes(call.status)) continue
      if (call.decisionId) decisions.push(call.decisionId)
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
    const updated = await updateRun(tx, run.id, endPatch(end))
    await appendEvents(tx, this.ended(updated, end))
    return decisions
  }

  /**
   * The events that announce a run's end (whoever writes it: `end`, or a fence that carries
   * `endPatch`), from the run and how it ends; also tells the observer.
   */
  ended(run: Run, end: RunEnd): NewEvent[] {
    const runId = run.id
    const terminal =
      end.status === 'completed'
        ? runEvent(run, 'run.completed', { runId, usage: end.usage ?? run.usage })
        : end.status === 'failed'
          ? runEvent(run, 'run.failed', { runId, error: end.error ?? run.error })
          : end.status === 'cancelled'
            ? runEvent(run, 'run.cancelled', { runId, reason: end.reason ?? 'cancelled' })
            : runEvent(run, 'run.expired', { runId })
    this.#observer?.runEnded?.({
      status: end.status,
      durationMs: run.startedAt ? Date.now() - Date.parse(run.startedAt) : null,
    })
    return [runEvent(run, 'run.status', { runId, status: end.status, phase: null }), terminal]
  }
}

/** A run's terminal state as one patch (so a fence can end a run that has nothing open in its own statement). */
export function endPatch(end: RunEnd): RunPatch {
  return {
    move: moveInto(end.status),
    phase: null,
    requiredAction: null,
    ended: true,
    lease: null,
    waiting: false,
    ...(end.error && { error: end.error }),
    ...(end.reason && { cancelReason: end.reason }),
    ...(end.usage && { usage: end.usage }),
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
