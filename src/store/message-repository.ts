import { sql } from 'kysely'
import type { JsonValue } from './database.js'
import { idAfter, newId } from './ids.js'
import { toPage, type Page, type PageRequest } from './page.js'
import { kysely, type Executor } from './executor.js'

export interface Message {
  id: string
  conversationId: string
  runId: string | null
  role: 'system' | 'user' | 'assistant' | 'tool'
  content: string | null
  toolCalls: JsonValue | null
  toolCallId: string | null
  status: string
  /** A user message's parts beyond its text (images kept as the conversation's files). */
  parts: JsonValue | null
  createdAt: string
  /** A tool message's call: its outcome and raw output (what `tool_call.completed` carried live). */
  toolStatus?: string | null
  toolOutput?: JsonValue | null
}

/** A conversation's transcript, oldest first. */
export async function listMessages(db: Executor, conversationId: string, page: PageRequest): Promise<Page<Message>> {
  let query = kysely(db)
    .selectFrom('messages as m')
    .leftJoin('run_tool_calls as c', 'c.id', 'm.tool_call_id')
    .selectAll('m')
    .select(['c.status as tool_status', 'c.output as tool_output'])
    .where('m.conversation_id', '=', conversationId)
    .orderBy('m.id')
    .limit(page.limit + 1)
  if (page.after) query = query.where('m.id', '>', page.after)
  const rows = await query.execute()
  return toPage(
    rows.map((row) =>
      row.role === 'tool'
        ? { ...toMessage(row), toolStatus: row.tool_status, toolOutput: row.tool_output }
        : toMessage(row),
    ),
    page.limit,
  )
}

function toMessage(row: {
  id: string
  conversation_id: string
  run_id: string | null
  role: Message['role']
  content: string | null
  tool_calls: JsonValue | null
  tool_call_id: string | null
  status: string
  parts?: JsonValue | null
  created_at: Date
}): Message {
  return {
    id: row.id,
    conversationId: row.conversation_id,
    runId: row.run_id,
    role: row.role,
    content: row.content,
    toolCalls: row.tool_calls,
    toolCallId: row.tool_call_id,
    status: row.status,
    parts: row.parts ?? null,
    createdAt: row.created_at.toISOString(),
  }
}

/** A run's messages (its user message, the model's turns and the tool results), oldest first. */
export async function runMessages(db: Executor, runId: string): Promise<Message[]> {
  const rows = await kysely(db)
    .selectFrom('messages')
    .selectAll()
    .where('run_id', '=', runId)
    .orderBy('id')
    .limit(1000)
    .execute()
  return rows.map(toMessage)
}

/**
 * A queued run's user message was written when the run was queued; the runs ahead of it wrote on. When
 * it starts, the message takes a new id (ids order the transcript and `GET …/messages`), so the question
 * comes after what was written before it was answered, not in the middle of an earlier run's turn
 * (docs/guides/agent-runs.md). Nothing is moved when nothing of a started run came after it (another
 * queued message does not count). The new id sorts after every message of the conversation, whatever
 * the clock of the instance that wrote the last one.
 */
export async function moveInputAfterEarlierRuns(tx: Executor, runId: string): Promise<void> {
  const { rows } = await sql<{ id: string; last: string }>`
    select m.id, (select max(a.id) from messages a where a.conversation_id = m.conversation_id) as last
    from messages m
    where m.run_id = ${runId} and m.role = 'user'
      and exists (select 1 from messages l where l.conversation_id = m.conversation_id and l.id > m.id
                  and (l.role <> 'user' or l.run_id is null
                       or exists (select 1 from runs q where q.id = l.run_id and q.started_at is not null)))`.execute(
    kysely(tx),
  )
  const moving = rows[0]
  if (!moving) return
  const fresh = newId()
  const id = fresh > moving.last ? fresh : idAfter(moving.last)
  await sql`update messages set id = ${id}, created_at = now() where id = ${moving.id}`.execute(kysely(tx))
}
