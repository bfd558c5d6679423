import { sql, type RawBuilder } from 'kysely'
import type { JsonValue } from './database.js'
import { appendEvents } from './event-log.js'
import { newId } from './ids.js'
import { storableJson } from './storable.js'
import { runEvent, type Run } from './run-repository.js'
import { kysely, type Executor } from './executor.js'

export interface StoredToolCall {
  callId: string
  providerCallId: string
  name: string
  arguments: string
}

export async function completeAssistantMessage(
  tx: Executor,
  id: string,
  content: string,
  toolCalls: StoredToolCall[] | null,
  status: 'completed' | 'cancelled' | 'failed' | 'interrupted',
): Promise<void> {
  await kysely(tx)
    .updateTable('messages')
    .set({ content, tool_calls: toolCalls && toolCalls.length > 0 ? storableJson(toolCalls) : null, status })
    .where('id', '=', id)
    .execute()
}

/**
 * Closes a run's assistant messages still streaming (a turn cut off by a crash, or by a cancel made
 * elsewhere), with the `message.completed` event each, so a client streaming it sees it end. Text
 * streamed before lives only in the `message.delta` events; it becomes the message's content rather
 * than being lost. Returns how many there were.
 */
export async function closeStreamingMessages(
  tx: Executor,
  run: Pick<Run, 'id' | 'conversationId' | 'projectId' | 'ownerId'>,
  status: 'cancelled' | 'interrupted',
): Promise<number> {
  const { rows } = await sql<{ id: string; content: string | null }>`
    update messages m set status = ${status}, content = coalesce(nullif(m.content, ''), (
      select string_agg(e.data->>'text', '' order by e.id) from events e
      where e.run_id = m.run_id and e.type = 'message.delta' and e.data->>'messageId' = m.id
    ), m.content)
    where m.run_id = ${run.id} and m.status = 'streaming'
    returning m.id, m.content`.execute(kysely(tx))
  if (rows.length === 0) return 0
  await appendEvents(
    tx,
    rows.map((row) =>
      runEvent(run, 'message.completed', { messageId: row.id, content: row.content ?? '', toolCalls: null, status }),
    ),
  )
  return rows.length
}

export async function insertToolMessage(tx: Executor, run: Run, callId: string, content: string): Promise<string> {
  const id = newId()
  await insertToolMessageQuery(tx, run, callId, content, id).execute()
  return id
}

/** The tool message's insert as a query, to ride in a larger statement (`appendEventsAfter`). */
export function insertToolMessageQuery(
  tx: Executor,
  run: Pick<Run, 'id' | 'conversationId'>,
  callId: string,
  content: string,
  id = newId(),
  parts?: MessagePart[],
) {
  return kysely(tx)
    .insertInto('messages')
    .values({
      id,
      conversation_id: run.conversationId,
      run_id: run.id,
      role: 'tool',
      content,
      tool_call_id: callId,
      status: 'completed',
      ...(parts && parts.length > 0 && { parts: storableJson(parts) }),
    })
    .returning('id')
}

export interface TranscriptMessage {
  id: string
  role: 'system' | 'user' | 'assistant' | 'tool'
  content: string | null
  toolCalls: StoredToolCall[] | null
  toolCallId: string | null
  status: string
  /** A user message's parts (text and images), when it has more than text. */
  parts?: MessagePart[] | null
}

/**
 * A stored part of a user message: text, an image kept as a file of the conversation, or a document —
 * a conversation file (`path`) or a knowledge item (`knowledgeId`) — with its extracted text.
 */
export type MessagePart =
  | { type: 'text'; text: string }
  | { type: 'image'; path: string; mediaType: string; width: number; height: number; bytes: number }
  | {
      type: 'file'
      filename: string
      mediaType: string
      bytes: number
      text: string
      path?: string
      knowledgeId?: string
    }

/** The whole transcript of a conversation, oldest first (what the model is shown, after trimming). */
export async function readTranscript(db: Executor, conversationId: string): Promise<TranscriptMessage[]> {
  const rows = await kysely(db)
    .selectFrom('messages')
    .selectAll()
    .where('conversation_id', '=', conversationId)
    .orderBy('id')
    .execute()
  return rows.map(toTranscriptMessage)
}

/**
 * The newest messages of a conversation that fit in `maxChars` (content and tool calls, plus a little
 * for each message's frame), oldest first — what a model call can be shown at most. Reads at most
 * `maxRows` rows however long the conversation, so a round's cost does not grow with its length.
 */
export async function readTranscriptTail(
  db: Executor,
  conversationId: string,
  maxChars: number,
  maxRows = 2000,
): Promise<TranscriptRow[]> {
  const { rows } = await sql<MessageRow>`${tailQuery(conversationId, maxChars, maxRows)}`.execute(kysely(db))
  return rows.map(toTranscriptRow)
}

/** The conversation's messages after `afterId`, oldest first (to extend a transcript read earlier). */
export async function readTranscriptAfter(
  db: Executor,
  conversationId: string,
  afterId: string,
  maxRows = 2000,
): Promise<TranscriptRow[]> {
  const { rows } = await sql<MessageRow>`${afterQuery(conversationId, afterId, maxRows)}`.execute(kysely(db))
  return rows.map(toTranscriptRow)
}

/** `readTranscriptTail` as a scalar subquery (a JSON array), to ride in a larger statement. */
export function transcriptTailRead(conversationId: string, maxChars: number, maxRows = 2000): RawBuilder<unknown> {
  // The aggregate orders its rows itself: the subquery need not sort them first (a second sort of the window).
  return jsonRows(tailQuery(conversationId, maxChars, maxRows, false))
}

/** `readTranscriptAfter` as a scalar subquery (a JSON array), to ride in a larger statement. */
export function transcriptAfterRead(conversationId: string, afterId: string, maxRows = 2000): RawBuilder<unknown> {
  return jsonRows(afterQuery(conversationId, afterId, maxRows))
}

/** How many messages of the conversation lie from `firstId` through `lastId` (a scalar subquery). */
export function messageCountRead(conversationId: string, firstId: string, lastId: string): RawBuilder<number> {
  return sql<number>`(select count(*)::int from messages where conversation_id = ${conversationId} and id between ${firstId} and ${lastId} and ${ofStartedRuns})`
}

/**
 * A model's transcript leaves out the message of a run that has not started: one queued behind the
 * active run (which must not answer it in its next round) or cancelled while queued (never answered).
 */
const ofStartedRuns = sql`(role <> 'user' or run_id is null or not exists (select 1 from runs q where q.id = messages.run_id and q.started_at is null))`

/**
 * Rows as one JSON array of arrays (columns in `JsonRow`'s order): a long window's column names,
 * repeated in every row, cost more to build, send and parse than its values (docs/reference/benchmarks.md).
 */
function jsonRows(rows: RawBuilder<MessageRow>): RawBuilder<unknown> {
  return sql`select coalesce(json_agg(json_build_array(t.id, t.role, t.content, t.tool_calls, t.tool_call_id, t.status, t.parts, t.size) order by t.id), '[]'::json) from (${rows}) t`
}

type JsonRow = [
  MessageRow['id'],
  MessageRow['role'],
  MessageRow['content'],
  MessageRow['tool_calls'],
  MessageRow['tool_call_id'],
  MessageRow['status'],
  MessageRow['parts'],
  MessageRow['size'],
]

/** The rows a transcript read returned as JSON. */
export function transcriptRowsFromJson(value: unknown): TranscriptRow[] {
  return (Array.isArray(value) ? (value as JsonRow[]) : []).map(
    ([id, role, content, tool_calls, tool_call_id, status, parts, size]) =>
      toTranscriptRow({ id, role, content, tool_calls, tool_call_id, status, parts, size }),
  )
}

/**
 * However long they are, a prompt keeps the latest this many messages and the user message the oldest
 * of them answers (the context budget's rule, docs/guides/agent-runs.md#context-compaction).
 */
export const latestKept = 6

/**
 * The newest rows within `maxChars`, and at least the latest `latestKept`, with the rows back to the
 * question they answer (the newest user message at or before the 6th newest) when those fit in
 * `maxChars` more: a turn of many long tool rounds keeps its latest 6 without reading the whole turn.
 */
function tailQuery(conversationId: string, maxChars: number, maxRows: number, ordered = true): RawBuilder<MessageRow> {
  return sql<MessageRow>`
    select id, role, content, tool_calls, tool_call_id, status, parts, size from (
      select v.*, max(case when v.id = v.floor_id then v.through - v.size end) over () as floor_before
      from (
        select u.*,
               coalesce(max(case when u.role = 'user' and u.rn >= ${latestKept} then u.id end) over (),
                        min(case when u.rn <= ${latestKept} then u.id end) over ()) as floor_id,
               coalesce(max(case when u.rn = ${latestKept} then u.through end) over (), max(u.through) over ()) as six_through
        from (
          select m.*, sum(m.size) over (order by m.id desc) as through, row_number() over (order by m.id desc) as rn
          from (select *, ${transcriptSize} as size from messages where conversation_id = ${conversationId}
                  and id > ${compactedThrough(conversationId)} and ${ofStartedRuns} order by id desc limit ${maxRows}) m
        ) u
      ) v
    ) t
    where t.through - t.size < ${maxChars} or t.rn <= ${latestKept}
       or (t.id >= t.floor_id and t.floor_before < t.six_through + ${maxChars})
    ${ordered ? sql`order by id` : sql``}`
}

function afterQuery(conversationId: string, afterId: string, maxRows: number): RawBuilder<MessageRow> {
  return sql<MessageRow>`
    select id, role, content, tool_calls, tool_call_id, status, parts, ${transcriptSize} as size from messages
    where conversation_id = ${conversationId} and id > ${afterId} and ${ofStartedRuns} order by id limit ${maxRows}`
}

/**
 * The last message the conversation's newest compaction stands for ('' when none): prompts read what
 * comes after it (docs/guides/agent-runs.md#context-compaction).
 */
function compactedThrough(conversationId: string): RawBuilder<string> {
  return sql<string>`coalesce((select through_message_id from compactions where conversation_id = ${conversationId} order by id desc limit 1), '')`
}

/** What a message counts for against the window (its text, its calls' JSON, and a per-message allowance). */
const transcriptSize = sql`(coalesce(length(content), 0) + coalesce(length(tool_calls::text), 0) + 64)`

/**
 * A message row just written, as one row of `transcriptRowsFromJson`'s array: for a statement's
 * `returning`, when its reads (in the statement's snapshot) cannot see the row.
 */
export const transcriptRowJson = sql`json_build_array(id, role, content, tool_calls, tool_call_id, status, parts, ${transcriptSize})`

/** A transcript message with what it counts for against the model's window. */
export interface TranscriptRow extends TranscriptMessage {
  size: number
}

function toTranscriptRow(row: MessageRow): TranscriptRow {
  return { ...toTranscriptMessage(row), size: Number(row.size) }
}

interface MessageRow {
  id: string
  role: TranscriptMessage['role']
  content: string | null
  tool_calls: JsonValue | null
  tool_call_id: string | null
  status: string
  parts?: JsonValue | null
  size?: number | string
}

function toTranscriptMessage(row: MessageRow): TranscriptMessage {
  return {
    id: row.id,
    role: row.role,
    content: row.content,
    toolCalls: (row.tool_calls as StoredToolCall[] | null) ?? null,
    toolCallId: row.tool_call_id,
    status: row.status,
    ...(row.parts && { parts: row.parts as MessagePart[] }),
  }
}
