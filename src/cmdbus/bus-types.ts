import type { Actor, Entrance, JsonValue } from '../extension/index.js'
import type { CarriedResult, Conversation, DispatchStartPart, Executor, FencedPart, Project } from '../store/index.js'
import type { DrivenCall } from './driven-call.js'

export type Params = { [key: string]: JsonValue }

/** One request to run a command, from any entrance. */
export interface DispatchRequest {
  commandId: string
  params: Params
  entrance: Entrance
  actor: Actor
  projectId?: string | null
  conversationId?: string | null
  runId?: string | null
  callId?: string | null
  /** Same key + same params → the first outcome; same key + other params → `idempotency_key_reused`. */
  idempotencyKey?: string | null
  /** The caller knows no dispatch has used this key yet: skip looking (a conflict is still detected on insert). */
  fresh?: boolean
  approvalPolicy?: 'ask' | 'dontAsk'
  signal?: AbortSignal
  /**
   * The conversation and its project as the caller read them in its own statement just before this
   * dispatch (a driver's turn end): authorized exactly as a fresh read would be, without reading again.
   */
  known?: { conversation: Conversation; project: Project }
  /**
   * A model tool call of a run's driver: the call's ledger rows are written with the dispatch's, in
   * its statements and transactions, fenced by the driver's lease. Nothing of it runs for a replayed
   * outcome (its `recorded` stays false).
   */
  driven?: DrivenCall
}

/**
 * What goes with each step of a dispatch for the run behind it, inside the bus (`DrivenCall` for a
 * driver's call, the approved path's run lock and ledger settle for a decided one).
 */
export interface DispatchHooks {
  /**
   * Called first in every transaction of the dispatch, before the bus takes the audit and event locks:
   * the caller takes its row locks here, so every transaction takes locks in one order (rows, audit
   * chain, event log) and none can deadlock another.
   */
  lock?: (tx: Executor) => Promise<void>
  persisted?: (tx: Executor) => Promise<void>
  settled?: (tx: Executor, outcome: DispatchOutcome) => Promise<void>
  /**
   * For the finished step: the caller's part (its fence, writes and events) to go in ONE statement
   * with the dispatch's row and audit entry, instead of `lock` and `settled` in a transaction.
   * `written` then says whether the fence held (the caller's part was written), and what a carried
   * transition (`then`) wrote and read.
   */
  finishTogether?: (
    outcome: DispatchOutcome,
  ) => (FencedPart & { written(result: { fenced: boolean; then?: CarriedResult }): void }) | undefined
  /**
   * For a dispatch that runs at once (no human asked): the caller's part to go in ONE statement with
   * the dispatch's row and its `requested` and `running` entries, instead of `lock` and `persisted` in
   * a transaction. Its writes go only if the dispatch was recorded (which needs the fence). When the fence did not hold, nothing is written and `lost()` is thrown.
   */
  startTogether?: () => DispatchStartPart & { lost(): Error }
}

/** Stable codes of a dispatch that did not succeed. */
export type BusErrorCode =
  | 'unknown_command'
  | 'entrance_not_allowed'
  | 'validation_failed'
  | 'not_found'
  | 'forbidden'
  | 'denied'
  | 'rejected'
  | 'expired'
  | 'cancelled'
  | 'command_timeout'
  | 'command_failed'
  | 'idempotency_key_reused'
  | 'dispatch_in_progress'
  | (string & {})

export interface BusError {
  code: BusErrorCode
  message: string
  errors?: Array<{ path: string; message: string }>
  reasons?: string[]
  /** Raised by a core command (not a plugin): some codes mean the server's own limits only then. */
  core?: boolean
}

/** A decision as clients see it (the `decision.required` card). */
export interface DecisionView {
  id: string
  dispatchId: string
  status: 'pending' | 'approved' | 'rejected' | 'expired'
  commandId: string
  params: JsonValue
  preview: string | null
  risk: string
  reasons: string[]
  projectId: string | null
  conversationId: string | null
  runId: string | null
  callId: string | null
  scope: 'once' | 'session' | null
  decidedBy: string | null
  note: string | null
  createdAt: string
  expiresAt: string
  decidedAt: string | null
  /** `connect`: connect your account to the call's MCP server (POST /api/mcp/connections/:server); that approves it. */
  kind: 'approve' | 'connect'
  /** An `edit` (approved with these params) or `respond` (not run; the text went to the model) answer. */
  reply: { kind: 'edit'; params: JsonValue } | { kind: 'respond'; text: string } | null
}

export type DispatchOutcome =
  | { status: 'succeeded'; dispatchId: string; result: JsonValue; replayed?: boolean }
  | { status: 'awaiting_decision'; dispatchId: string; decision: DecisionView; replayed?: boolean }
  | {
      status: 'failed' | 'rejected' | 'expired' | 'cancelled'
      dispatchId: string | null
      error: BusError
      replayed?: boolean
    }

/**
 * How a person answers: approve (once, or for the session), reject, `edit` (approve with changed params,
 * which must pass the command's schema) or `respond` (do not run; the text is the call's result).
 */
export type DecisionAnswer = 'approve' | 'approve_session' | 'reject' | 'edit' | 'respond'

/** What an `edit` or `respond` answer carries. */
export interface DecisionAnswerDetail {
  params?: JsonValue
  text?: string
}

export type DecideOutcome =
  | { ok: true; decision: DecisionView; dispatch: DispatchOutcome }
  | {
      ok: false
      error: {
        code:
          | 'not_found'
          | 'forbidden'
          | 'decision_conflict'
          | 'decision_expired'
          | 'scope_not_allowed'
          | 'validation_failed'
          | 'dispatch_in_progress'
        message: string
      }
      decision?: DecisionView
    }
