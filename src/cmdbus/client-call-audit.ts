import type { JsonValue } from '../extension/index.js'
import { findDispatchByKey, lastAuditEnvelope, newId, type DispatchRecord, type Executor } from '../store/index.js'
import { initialEnvelope, insertRequested, recordStep, type AuditEnvelope } from './audit-envelope.js'
import { hashParams } from './outcomes.js'

/** A client tool call, for its audit row. */
export interface ClientCallAudit {
  runId: string
  callId: string
  name: string
  args: JsonValue
  ownerId: string
  projectId: string | null
  conversationId: string | null
  risk: string | null
}

/**
 * A client tool call's audit row (entrance `agent`, `kind: "client"`; docs/guides/agent-runs.md, "Client
 * tools"): opened when the call is handed to the client, finished with its answer — in the caller's
 * transaction, like the ledger change it goes with.
 */
export async function auditClientCall(
  tx: Executor,
  call: ClientCallAudit,
  answer?: { status: string; output: JsonValue; error?: { code: string; message: string } },
): Promise<void> {
  const key = `${call.runId}:${call.callId}`
  let dispatch = await findDispatchByKey(tx, call.ownerId, key)
  let envelope: AuditEnvelope
  if (!dispatch) {
    const params = call.args !== null && typeof call.args === 'object' && !Array.isArray(call.args) ? call.args : {}
    const record = agentRecord(call, { commandId: call.name, plugin: 'client', key, params, risk: call.risk ?? 'low' })
    const requested = await insertRequested(tx, record, { ...initialEnvelope(record, undefined), kind: 'client' })
    if (!requested) return
    dispatch = record
    envelope = requested
  } else {
    envelope = (await lastAuditEnvelope(tx, dispatch.id)) ?? {
      ...initialEnvelope(dispatch, undefined),
      kind: 'client',
    }
  }
  if (!answer || dispatch.status !== 'requested') return
  const finishedAt = new Date().toISOString()
  const status = answer.status
  if (status === 'ok') {
    await recordStep(tx, 'finished', envelope, dispatch, { status: 'succeeded', result: answer.output, finishedAt })
    return
  }
  const mapped =
    status === 'rejected'
      ? 'rejected'
      : status === 'expired'
        ? 'expired'
        : status === 'cancelled'
          ? 'cancelled'
          : 'failed'
  await recordStep(tx, 'finished', envelope, dispatch, {
    status: mapped,
    result: answer.output,
    error: answer.error ?? {
      code: status === 'error' ? 'client_error' : status,
      message: clientEnding[mapped] ?? `the client answered ${status}`,
    },
    finishedAt,
  })
}

/** What ended a client call that did not succeed, as its audit entry says. */
const clientEnding: Record<string, string> = {
  rejected: 'the client rejected the call',
  expired: 'the client did not answer in time',
  cancelled: 'the run ended before the client answered',
  failed: 'the client answered with an error',
}

/** A run's own effect as a dispatch row: entrance `agent`, the run acting for its owner. */
function agentRecord(
  run: Pick<ClientCallAudit, 'runId' | 'ownerId' | 'projectId' | 'conversationId'> & { callId?: string | null },
  what: { commandId: string; plugin: string; key: string; params: { [key: string]: JsonValue }; risk: string },
): DispatchRecord {
  const now = new Date().toISOString()
  return {
    id: newId(),
    commandId: what.commandId,
    plugin: what.plugin,
    pluginVersion: '',
    entrance: 'agent',
    actor: { type: 'agent', id: run.runId, onBehalfOf: run.ownerId },
    ownerId: run.ownerId,
    projectId: run.projectId,
    conversationId: run.conversationId,
    runId: run.runId,
    callId: run.callId ?? null,
    idempotencyKey: what.key,
    params: what.params,
    paramsHash: hashParams(what.params),
    requestHash: null,
    risk: what.risk,
    status: 'requested',
    decisionId: null,
    result: null,
    error: null,
    createdAt: now,
    updatedAt: now,
  }
}

/**
 * A run stopped by its budget, in the audit chain (docs/guides/operating.md#budgets): a `core.budget_stop`
 * entry (kind `budget`) failed with the run's `budget_exceeded` error, in the transaction that ends the run.
 */
export async function auditBudgetStop(
  tx: Executor,
  run: Pick<ClientCallAudit, 'runId' | 'ownerId' | 'projectId' | 'conversationId'> & { modelCalls: number },
  error: { code: string; message: string; [key: string]: JsonValue },
): Promise<void> {
  const record = agentRecord(run, {
    commandId: 'core.budget_stop',
    plugin: 'core',
    // One per stop: a resumed run stopped again later has spent more calls.
    key: `${run.runId}:budget:${run.modelCalls}`,
    params: { budget: error.budget ?? null },
    risk: 'low',
  })
  const requested = await insertRequested(tx, record, { ...initialEnvelope(record, undefined), kind: 'budget' })
  if (!requested) return
  await recordStep(tx, 'finished', requested, record, {
    status: 'failed',
    error,
    finishedAt: new Date().toISOString(),
  })
}
