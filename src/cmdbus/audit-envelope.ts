import { createHash } from 'node:crypto'
import type { JsonSchema, JsonValue } from '../extension/index.js'
import {
  appendAuditEntry,
  insertDispatchAudited,
  insertDispatchStarted,
  updateDispatchAudited,
  updateDispatchQuery,
  type AuditEntryInput,
  type DispatchChange,
  type DispatchRecord,
  type DispatchStatus,
  type Executor,
  type DispatchStartPart,
  type Store,
} from '../store/index.js'
import { redact, truncateForAudit } from './redact.js'

/** The audit envelope of one dispatch, the same shape for every entrance (docs/guides/commands-and-decisions.md). */
export interface AuditEnvelope {
  [key: string]: JsonValue
}

export interface DecisionSummary {
  id: string | null
  outcome: 'pending' | 'approved' | 'rejected' | 'expired'
  by: string | null
  scope: 'once' | 'session' | null
  /** What let the call through: a human, a session allowance, the permission mode, or its low risk. */
  via: 'human' | 'allowance' | 'mode' | 'risk' | null
  /** The person approved it with changed params (`edit`), or answered in its place (`respond`). */
  reply?: 'edit' | 'respond'
}

/** Builds the first envelope of a dispatch. */
export function initialEnvelope(
  dispatch: DispatchRecord,
  schema: JsonSchema | undefined,
  origin?: { [key: string]: JsonValue },
): AuditEnvelope {
  return {
    // A mounted command's source (an MCP server: its name, reported name and version, the remote tool).
    ...(origin && { origin }),
    id: dispatch.id,
    commandId: dispatch.commandId,
    plugin: dispatch.plugin,
    pluginVersion: dispatch.pluginVersion,
    entrance: dispatch.entrance,
    actor: { ...dispatch.actor },
    projectId: dispatch.projectId,
    conversationId: dispatch.conversationId,
    runId: dispatch.runId,
    callId: dispatch.callId,
    params: redact(dispatch.params, schema),
    paramsHash: dispatch.paramsHash,
    risk: dispatch.risk,
    decision: null,
    result: null,
    resultHash: null,
    status: dispatch.status,
    error: null,
    timings: { requestedAt: dispatch.createdAt, startedAt: null, finishedAt: null, durationMs: null },
  }
}

export interface EnvelopeChange {
  status: DispatchStatus
  risk?: string
  decision?: DecisionSummary
  result?: JsonValue
  error?: { code: string; message: string; [key: string]: JsonValue }
  startedAt?: string
  finishedAt?: string
  /** The process that runs the dispatch, and until when it vouches for it (see the orphan sweep). */
  executor?: { id: string; expiresAt: Date }
}

/**
 * Records one step of a dispatch, in the caller's transaction: the dispatch row's state and an
 * appended, hash-chained audit entry carrying the whole envelope as it now stands.
 */
export async function recordStep(
  tx: Executor,
  step: string,
  envelope: AuditEnvelope,
  dispatch: DispatchRecord,
  change: EnvelopeChange,
): Promise<AuditEnvelope> {
  // The row was inserted in this state (insertRequested); later steps change it with their entry.
  if (step === 'requested') {
    const next = nextEnvelope(envelope, change)
    await appendAuditEntry(tx, auditEntry(step, dispatch, next))
    return next
  }
  const parts = stepParts(tx, step, envelope, dispatch, change)
  await updateDispatchAudited(tx, dispatch.id, parts.change, parts.entry)
  return parts.next
}

/** A later step's parts — the next envelope, the row change (also as a query) and the audit entry — for a caller that writes them in a larger statement. */
export function stepParts(
  db: Executor,
  step: string,
  envelope: AuditEnvelope,
  dispatch: DispatchRecord,
  change: EnvelopeChange,
) {
  const next = nextEnvelope(envelope, change)
  const rowChange: DispatchChange = {
    status: change.status,
    ...(change.risk !== undefined && { risk: change.risk }),
    ...(change.decision?.id && { decisionId: change.decision.id }),
    ...(change.result !== undefined && { result: change.result }),
    ...(change.error !== undefined && { error: change.error }),
    ...(change.executor && { executor: change.executor }),
  }
  return {
    next,
    change: rowChange,
    /** The row change as a query, for a statement that writes it with more (built only then). */
    query: () => updateDispatchQuery(db, dispatch.id, rowChange),
    entry: auditEntry(step, dispatch, next),
  }
}

/**
 * Inserts a new dispatch with its `requested` entry, in one statement; `undefined` (nothing written)
 * when its idempotency key is taken.
 */
export async function insertRequested(
  tx: Executor,
  dispatch: DispatchRecord,
  envelope: AuditEnvelope,
): Promise<AuditEnvelope | undefined> {
  const next = nextEnvelope(envelope, { status: 'requested' })
  return (await insertDispatchAudited(tx, dispatch, auditEntry('requested', dispatch, next))) ? next : undefined
}

/**
 * Records a new dispatch that runs at once — its row and its `requested` and `running` entries — in
 * one statement: with the caller's fenced part when given (`insertDispatchStarted`), otherwise one
 * shared with other dispatches' steps (`Store.dispatchStep`). Returns the
 * `running` envelope, or why nothing was written: the fence did not hold, or the key was taken.
 */
export async function recordStarted(
  store: Store,
  dispatch: DispatchRecord,
  envelope: AuditEnvelope,
  change: EnvelopeChange & { status: 'running'; risk: string; executor: { id: string; expiresAt: Date } },
  run: DispatchStartPart | undefined,
): Promise<AuditEnvelope | 'lost' | 'key_taken'> {
  const requested = nextEnvelope(envelope, { status: 'requested' })
  const running = nextEnvelope(requested, change)
  const starting = {
    ...dispatch,
    status: 'running' as const,
    risk: change.risk,
    decisionId: change.decision?.id ?? null,
    executor: change.executor,
  }
  const audits = [auditEntry('requested', dispatch, requested), auditEntry('running', dispatch, running)]
  // Without a run's part, it shares a statement with the steps of concurrent dispatches.
  if (!run) return (await store.dispatchStep({ kind: 'start', dispatch: starting, audits })) ? running : 'key_taken'
  const written = await store.statement((db, tag, deferFlush) =>
    insertDispatchStarted(db, starting, audits, run, tag, deferFlush),
  )
  if (!written.fenced) return 'lost'
  return written.inserted ? running : 'key_taken'
}

function nextEnvelope(envelope: AuditEnvelope, change: EnvelopeChange): AuditEnvelope {
  const timings = { ...(envelope.timings as { [key: string]: JsonValue }) }
  if (change.startedAt) timings.startedAt = change.startedAt
  if (change.finishedAt) {
    timings.finishedAt = change.finishedAt
    const from = typeof timings.startedAt === 'string' ? timings.startedAt : (timings.requestedAt as string)
    timings.durationMs = Date.parse(change.finishedAt) - Date.parse(from)
  }
  const next: AuditEnvelope = {
    ...envelope,
    status: change.status,
    timings,
    ...(change.risk !== undefined && { risk: change.risk }),
    ...(change.decision !== undefined && { decision: { ...change.decision } }),
    ...(change.error !== undefined && { error: change.error }),
  }
  if (change.result !== undefined) {
    next.result = truncateForAudit(redact(change.result))
    next.resultHash = createHash('sha256')
      .update(JSON.stringify(change.result) ?? 'null')
      .digest('hex')
  }
  return next
}

function auditEntry(step: string, dispatch: DispatchRecord, envelope: AuditEnvelope): AuditEntryInput {
  return {
    dispatchId: dispatch.id,
    step,
    ownerId: dispatch.ownerId,
    projectId: dispatch.projectId,
    conversationId: dispatch.conversationId,
    commandId: dispatch.commandId,
    entrance: dispatch.entrance,
    envelope,
  }
}
