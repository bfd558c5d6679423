import { sql, type RawBuilder } from 'kysely'
import type { Executor, JsonValue } from './database.js'
import { eventFromJson, eventLogLock, eventsChannel, eventValues, type EventRecord, type NewEvent } from './event-log.js'
import { patchColumns, toRun, type Run, type RunPatch, type RunRow, type StoredToolCall, type ToolCallRecord } from './run-repository.js'

/**
 * A write that belongs to a run's state change: a data-modifying statement that changes something
 * only when the fence (the CTE `f`, the run's row as the lease holder just updated it) holds.
 */
export interface TransitionWrite {
  readonly sql: RawBuilder<unknown>
}

/** The lease that must still hold, and how long it is renewed for. */
export interface TransitionFence {
  runId: string
  owner: string
  expiresAt: Date
}

/**
 * One state change of a run in ONE statement (no BEGIN/COMMIT): the fence's update with the run's
 * patch, then the writes, then the events — each only if the lease still holds. Row locks come first
 * and the event log's lock last (the writes are finished before it is taken), the order every
 * transaction keeps. `undefined` when the lease has passed: nothing was written.
 */
export async function runTransition(
  db: Executor,
  fence: TransitionFence,
  patch: RunPatch,
  writes: TransitionWrite[],
  events: NewEvent[],
  tag: string,
): Promise<{ run: Run; events: EventRecord[] } | undefined> {
  const set = Object.entries({ lease_expires_at: fence.expiresAt, ...patchColumns(patch) }).map(([column, value]) => sql`${sql.ref(column)} = ${value}`)
  const names = writes.map((_, index) => `w${index}`)
  const ctes = writes.map((write, index) => sql`, ${sql.ref(names[index]!)} as (${write.sql})`)
  // Each write's rows are counted before the lock is taken: that forces them to run first.
  const writesDone = names.map((name) => sql` and (select count(*) from ${sql.ref(name)}) >= 0`)
  const eventsPart =
    events.length === 0
      ? sql`, e as (select null::bigint as id where false)`
      : sql`, lk as (select pg_advisory_xact_lock(${eventLogLock}) as locked from f where true ${sql.join(writesDone, sql``)}),
        e as (
          insert into events (type, project_id, conversation_id, run_id, user_id, data, size)
          select v.type, v.project_id, v.conversation_id, v.run_id, v.user_id, v.data, v.size from lk, ${eventValues(events)}
          returning id, type, project_id, conversation_id, run_id, user_id, data, created_at, pg_notify(${eventsChannel}, ${tag}) as notified)`
  const { rows } = await sql<RunRow & { events: Array<{ [key: string]: JsonValue }> | null }>`
    with f as (
      update runs set ${sql.join(set)}
      where id = ${fence.runId} and lease_owner = ${fence.owner} and status = 'running'
      returning *
    )${sql.join(ctes, sql``)}${eventsPart}
    select f.*, (select jsonb_agg(to_jsonb(e.*) - 'notified') from e) as events from f`.execute(db)
  const row = rows[0]
  if (!row) return undefined
  const appended = (row.events ?? []).map(eventFromJson).sort((a, b) => a.id - b.id)
  return { run: toRun(row), events: appended }
}

/** Inserts the assistant message a model turn streams into. */
export function insertAssistantMessageWrite(run: Pick<Run, 'id' | 'conversationId'>, id: string): TransitionWrite {
  return {
    sql: sql`insert into messages (id, conversation_id, run_id, role, content, status)
      select ${id}, ${run.conversationId}, ${run.id}, 'assistant', '', 'streaming' from f returning id`,
  }
}

/** Completes (or closes) an assistant message with its text and calls. */
export function completeAssistantMessageWrite(
  id: string,
  content: string,
  toolCalls: StoredToolCall[] | null,
  status: 'completed' | 'cancelled' | 'failed' | 'interrupted',
): TransitionWrite {
  const calls = toolCalls && toolCalls.length > 0 ? JSON.stringify(toolCalls) : null
  return {
    sql: sql`update messages set content = ${content}, tool_calls = ${calls}::jsonb, status = ${status}
      where id = ${id} and exists (select 1 from f) returning id`,
  }
}

/** Inserts a turn's tool calls into the run's ledger, `pending`. */
export function insertToolCallsWrite(calls: Array<Omit<ToolCallRecord, 'status' | 'output' | 'modelOutput' | 'modelTruncated' | 'dispatchId' | 'decisionId' | 'repeatOf'>>): TransitionWrite {
  const values = calls.map(
    (call) =>
      sql`(${call.id}, ${call.runId}, ${call.messageId}, ${call.iteration}::int, ${call.seq}::int, ${call.providerCallId}, ${call.name}, ${call.commandId}, ${call.kind}, ${call.args === null ? null : JSON.stringify(call.args)}::jsonb, ${call.rawArgs}, ${call.risk})`,
  )
  return {
    sql: sql`insert into run_tool_calls (id, run_id, message_id, iteration, seq, provider_call_id, name, command_id, kind, args, raw_args, risk, status)
      select v.*, 'pending' from f, (values ${sql.join(values)}) as v (id, run_id, message_id, iteration, seq, provider_call_id, name, command_id, kind, args, raw_args, risk)
      returning id`,
  }
}
