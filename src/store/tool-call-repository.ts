import type { JsonValue, ToolCallStatus } from './database.js'
import { storableJson } from './storable.js'
import { kysely, type Executor } from './executor.js'

export interface ToolCallRecord {
  id: string
  runId: string
  messageId: string
  iteration: number
  seq: number
  providerCallId: string
  name: string
  commandId: string | null
  kind: 'command' | 'client' | 'unknown'
  args: JsonValue | null
  rawArgs: string
  risk: string | null
  status: ToolCallStatus
  output: JsonValue | null
  modelOutput: string | null
  modelTruncated: boolean
  dispatchId: string | null
  decisionId: string | null
  repeatOf: string | null
}

export const terminalToolCallStatuses: ToolCallStatus[] = [
  'ok',
  'error',
  'rejected',
  'cancelled',
  'expired',
  'interrupted',
]

export type ToolCallPatch = {
  status: ToolCallStatus
  output?: JsonValue
  modelOutput?: string
  modelTruncated?: boolean
  dispatchId?: string | null
  decisionId?: string | null
  repeatOf?: string | null
  started?: boolean
}

export async function updateToolCall(tx: Executor, id: string, patch: ToolCallPatch): Promise<void> {
  await updateToolCallQuery(tx, id, patch).execute()
}

/** The ledger row's update as a query, to ride in a larger statement (`appendEventsAfter`). */
export function updateToolCallQuery(tx: Executor, id: string, patch: ToolCallPatch) {
  const terminal = terminalToolCallStatuses.includes(patch.status)
  return kysely(tx)
    .updateTable('run_tool_calls')
    .set({
      status: patch.status,
      ...(patch.output !== undefined && { output: storableJson(patch.output) }),
      ...(patch.modelOutput !== undefined && { model_output: patch.modelOutput }),
      ...(patch.modelTruncated !== undefined && { model_truncated: patch.modelTruncated }),
      ...(patch.dispatchId !== undefined && { dispatch_id: patch.dispatchId }),
      ...(patch.decisionId !== undefined && { decision_id: patch.decisionId }),
      ...(patch.repeatOf !== undefined && { repeat_of: patch.repeatOf }),
      ...(patch.started && { started_at: new Date() }),
      ...(terminal && { ended_at: new Date() }),
    })
    .where('id', '=', id)
    .returning('id')
}

export async function listToolCalls(db: Executor, runId: string): Promise<ToolCallRecord[]> {
  const rows = await kysely(db)
    .selectFrom('run_tool_calls')
    .selectAll()
    .where('run_id', '=', runId)
    .orderBy('iteration')
    .orderBy('seq')
    .execute()
  return rows.map((row) => ({
    id: row.id,
    runId: row.run_id,
    messageId: row.message_id,
    iteration: row.iteration,
    seq: row.seq,
    providerCallId: row.provider_call_id,
    name: row.name,
    commandId: row.command_id,
    kind: row.kind,
    args: row.args,
    rawArgs: row.raw_args,
    risk: row.risk,
    status: row.status,
    output: row.output,
    modelOutput: row.model_output,
    modelTruncated: row.model_truncated,
    dispatchId: row.dispatch_id,
    decisionId: row.decision_id,
    repeatOf: row.repeat_of,
  }))
}
