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
  answer?: { status: string; output: JsonValue },
): Promise<void> {
  const key = `${call.runId}:${call.callId}`
  let dispatch = await findDispatchByKey(tx, call.ownerId, key)
  let envelope: AuditEnvelope
  if (!dispatch) {
    const now = new Date().toISOString()
    const params = call.args !== null && typeof call.args === 'object' && !Array.isArray(call.args) ? call.args : {}
    const record: DispatchRecord = {
      id: newId(),
      commandId: call.name,
      plugin: 'client',
      pluginVersion: '',
      entrance: 'agent',
      actor: { type: 'agent', id: call.runId, onBehalfOf: call.ownerId },
      ownerId: call.ownerId,
      projectId: call.projectId,
      conversationId: call.conversationId,
      runId: call.runId,
      callId: call.callId,
      idempotencyKey: key,
      params,
      paramsHash: hashParams(params),
      requestHash: null,
      risk: call.risk ?? 'low',
      status: 'requested',
      decisionId: null,
      result: null,
      error: null,
      createdAt: now,
      updatedAt: now,
    }
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
  const code = status === 'error' ? 'client_error' : status
  await recordStep(tx, 'finished', envelope, dispatch, {
    status: mapped,
    result: answer.output,
    error: { code, message: `the client answered ${status}` },
    finishedAt,
  })
}
