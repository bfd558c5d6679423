import type { ClientCallAudit, CommandBus, DispatchOutcome } from '../cmdbus/index.js'
import type { JsonValue } from '../extension/index.js'
import {
  appendEvents,
  appendEventsAfter,
  closeStreamingMessages,
  insertToolMessageQuery,
  listToolCalls,
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
import { capForModel } from './tool-output.js'

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

export const openStatuses: ToolCallStatus[] = ['pending', 'running', 'awaiting_decision', 'awaiting_output']

/**
 * The tool-call ledger's writes (SPEC §6.2): every call gets exactly one terminal result, written with
 * its tool message and event in the caller's transaction (the one that also changes the run's state).
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
    const modelText = status === 'ok' && call.commandId ? this.#bus.catalog.get(call.commandId)?.modelText : undefined
    const text = modelText ? modelText(output) : typeof output === 'string' ? output : JSON.stringify(output)
    const capped = capForModel(text, this.#toolOutputLimit)
    const writes = [
      updateToolCallQuery(tx, call.id, {
        status,
        output,
        modelOutput: capped.text,
        modelTruncated: capped.truncated,
        ...(extra.dispatchId !== undefined && { dispatchId: extra.dispatchId }),
        ...(extra.repeatOf !== undefined && { repeatOf: extra.repeatOf }),
      }),
      insertToolMessageQuery(tx, run, call.id, capped.text),
    ]
    // A client call's audit row ends with its ledger result (the audit chain's lock before the event log's).
    if (call.kind === 'client') await this.#bus.auditClientCall(tx, clientCallAudit(run, call), { status, output })
    this.#observer?.toolCall?.({ status })
    const started = this.#callStarts.get(call.id)
    this.#callStarts.delete(call.id)
    // The ledger row, the tool message and the event: one statement.
    await appendEventsAfter(tx, writes, [
      runEvent(run, 'tool_call.completed', {
        callId: call.id,
        status,
        output,
        modelTruncated: capped.truncated,
        durationMs: started === undefined ? null : Math.round(performance.now() - started),
        ...(extra.repeatOf && { repeatOf: extra.repeatOf }),
      }),
    ])
  }

  /** A dispatch's outcome as the call's result. */
  async applyOutcome(tx: Executor, run: Run, call: ToolCallRecord, outcome: DispatchOutcome): Promise<void> {
    if (outcome.status === 'succeeded') return this.finish(tx, run, call, 'ok', outcome.result, { dispatchId: outcome.dispatchId })
    if (outcome.status === 'awaiting_decision') return
    const error = outcome.error
    if (outcome.status === 'rejected' || error.code === 'rejected' || error.code === 'denied') {
      return this.finish(tx, run, call, 'rejected', { accepted: false, rejected: true, ...(error.code === 'denied' && { reason: error.message }) }, { dispatchId: outcome.dispatchId })
    }
    if (outcome.status === 'expired') return this.finish(tx, run, call, 'expired', { accepted: false, expired: true }, { dispatchId: outcome.dispatchId })
    if (outcome.status === 'cancelled') return this.finish(tx, run, call, 'cancelled', { accepted: false, cancelled: true }, { dispatchId: outcome.dispatchId })
    // Cut off by a crash: whether it took effect is unknown, and the call says so.
    if (error.code === 'interrupted') return this.finish(tx, run, call, 'interrupted', { error: JSON.parse(JSON.stringify(error)) as JsonValue }, { dispatchId: outcome.dispatchId })
    return this.finish(tx, run, call, 'error', { error: JSON.parse(JSON.stringify(error)) as JsonValue }, { dispatchId: outcome.dispatchId })
  }

  /** What a waiting run awaits (`requiredAction`). */
  async requiredAction(db: Executor, runId: string): Promise<JsonValue> {
    const calls = await listToolCalls(db, runId)
    return {
      decisions: calls
        .filter((call) => call.status === 'awaiting_decision')
        .map((call) => ({ decisionId: call.decisionId, callId: call.id, commandId: call.commandId, name: call.name, args: call.args, risk: call.risk })),
      toolOutputs: calls.filter((call) => call.status === 'awaiting_output').map((call) => ({ callId: call.id, name: call.name, args: call.args })),
    }
  }

  /**
   * Ends a run the caller has locked (or fenced): every open call gets its terminal result, a turn
   * still streaming is closed, the terminal state and events are written. Returns the decisions to
   * expire once the transaction commits.
   */
  async end(tx: Executor, run: Run, end: RunEnd): Promise<string[]> {
    const decisions: string[] = []
    for (const call of end.clean ? [] : await listToolCalls(tx, run.id)) {
      if (!openStatuses.includes(call.status)) continue
      if (call.decisionId) decisions.push(call.decisionId)
      const status = end.openCalls ?? 'cancelled'
      const code = status === 'error' ? String(end.error?.code ?? 'error') : status
      const output: JsonValue =
        call.kind === 'client' ? { accepted: false, [code]: true } : { error: { code, message: `the run ended (${end.reason ?? (status === 'error' ? code : end.status)}) before this call finished` } }
      await this.finish(tx, run, call, status, output)
    }
    // A turn that was streaming when the run ended (a crash, a cancel elsewhere) is closed, not left streaming.
    if (!end.clean) await closeStreamingMessages(tx, run.id, end.status === 'cancelled' ? 'cancelled' : 'interrupted')
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
    this.#observer?.runEnded?.({ status: end.status, durationMs: run.startedAt ? Date.now() - Date.parse(run.startedAt) : null })
    return [runEvent(run, 'run.status', { runId, status: end.status, phase: null }), terminal]
  }
}

/** A run's terminal state as one patch (so a fence can end a run that has nothing open in its own statement). */
export function endPatch(end: RunEnd): RunPatch {
  return {
    status: end.status,
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
  return { runId: run.id, callId: call.id, name: call.name, args: call.args, ownerId: run.ownerId, projectId: run.projectId, conversationId: run.conversationId, risk: call.risk }
}
