import { readTranscript, type RunStatus, type Store, type ToolCallStatus } from '../../src/store/index.js'
import { testDb } from '../../src/store/test-access.js'

const openStatuses: ToolCallStatus[] = ['pending', 'running', 'awaiting_decision', 'awaiting_output']
const activeRunStatuses: RunStatus[] = ['queued', 'running', 'requires_action']

/**
 * The tool-call ledger invariant (docs/architecture.md#the-tool-call-ledger) over every conversation in
 * the database: each tool result answers a call made earlier in its conversation, no call is answered
 * twice, and once no run of a conversation is active every call has its one result and no ledger row is
 * left open. Returns what is wrong, one line each (empty when the invariant holds).
 */
export async function ledgerViolations(store: Store): Promise<string[]> {
  const db = testDb(store)
  const problems: string[] = []
  const conversations = await db.selectFrom('conversations').select('id').execute()
  const active = new Set(
    (await db.selectFrom('runs').select('conversation_id').where('status', 'in', activeRunStatuses).execute()).map(
      (row) => row.conversation_id,
    ),
  )
  for (const { id } of conversations) {
    const transcript = await readTranscript(store, id)
    const called = new Set<string>()
    const answered = new Set<string>()
    for (const message of transcript) {
      for (const call of message.toolCalls ?? []) called.add(call.callId)
      if (message.role !== 'tool' || !message.toolCallId) continue
      if (!called.has(message.toolCallId))
        problems.push(`conversation ${id}: result for ${message.toolCallId} without an earlier call`)
      if (answered.has(message.toolCallId))
        problems.push(`conversation ${id}: call ${message.toolCallId} answered twice`)
      answered.add(message.toolCallId)
    }
    if (active.has(id)) continue
    for (const callId of called)
      if (!answered.has(callId)) problems.push(`conversation ${id}: call ${callId} never answered`)
  }
  const open = await db
    .selectFrom('run_tool_calls')
    .innerJoin('runs', 'runs.id', 'run_tool_calls.run_id')
    .select(['run_tool_calls.id as callId', 'run_tool_calls.status as callStatus', 'runs.status as runStatus'])
    .where('run_tool_calls.status', 'in', openStatuses)
    .where('runs.status', 'not in', activeRunStatuses)
    .execute()
  for (const row of open) problems.push(`ledger row ${row.callId} is ${row.callStatus} in a ${row.runStatus} run`)
  return problems
}

/** Throws with every violation when the ledger invariant does not hold. */
export async function assertLedgerInvariant(store: Store): Promise<void> {
  const problems = await ledgerViolations(store)
  if (problems.length > 0) throw new Error(`tool-call ledger invariant violated:\n${problems.join('\n')}`)
}
