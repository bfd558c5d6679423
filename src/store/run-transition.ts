import { sql, type OperationNodeSource, type RawBuilder } from 'kysely'
import { auditAppendCtes, type AuditEntryInput } from './audit-repository.js'
import type { JsonValue } from './database.js'
import {
  eventFromJson,
  eventLogLock,
  eventsChannel,
  eventValues,
  type EventRecord,
  type NewEvent,
} from './event-log.js'
import { newId } from './ids.js'
import { patchColumns, toRun, type ModelCallUsage, type Run, type RunPatch, type RunRow } from './run-repository.js'
import { transcriptRowJson, type MessagePart, type StoredToolCall } from './transcript-repository.js'
import { updateToolCallQuery, type ToolCallPatch, type ToolCallRecord } from './tool-call-repository.js'
import { storableJson } from './storable.js'
import { outboxAfter } from './webhook-outbox.js'
import { deferFlushColumn } from './wal-flush.js'
import { kysely, type Executor } from './executor.js'

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
  reads: TransitionReads = {},
): Promise<{ run: Run; events: EventRecord[]; reads: { [name: string]: unknown } } | undefined> {
  const set = fenceSet(fence, patch)
  const names = writes.map((_, index) => `w${index}`)
  const ctes = writes.map((write, index) => sql`, ${sql.ref(names[index]!)} as (${write.sql})`)
  // Each write's rows are counted before the lock is taken: that forces them to run first.
  const writesDone = names.map((name) => sql` and (select count(*) from ${sql.ref(name)}) >= 0`)
  // Reads too, so none is made while the event log's lock is held.
  const readNames = Object.keys(reads).map((name) => `read_${name}`)
  const readCtes = Object.values(reads).map(
    (read, index) => sql`, ${sql.ref(readNames[index]!)} as (select (${read}) as value)`,
  )
  const readsDone = readNames.map((name) => sql` and (select count(*) from ${sql.ref(name)}) >= 0`)
  const eventsPart =
    events.length === 0
      ? sql`, e as (select null::bigint as id where false)`
      : sql`, lk as (select pg_advisory_xact_lock(${eventLogLock}) as locked from f where true ${sql.join([...writesDone, ...readsDone], sql``)}),
        e as (
          insert into events (type, project_id, conversation_id, run_id, user_id, data, size)
          select v.type, v.project_id, v.conversation_id, v.run_id, v.user_id, v.data, v.size from lk, ${eventValues(events)}
          returning id, type, project_id, conversation_id, run_id, user_id, data, created_at, pg_notify(${eventsChannel}, ${tag}) as notified)${outboxAfter(events)}`
  const { rows } = await sql<RunRow & { events: Array<{ [key: string]: JsonValue }> | null }>`
    with f as (
      update runs set ${sql.join(set)}
      where id = ${fence.runId} and lease_owner = ${fence.owner} and status = 'running'
      returning *
    )${sql.join(ctes, sql``)}${sql.join(readCtes, sql``)}${eventsPart}
    select f.*, (select jsonb_agg(to_jsonb(e.*) - 'notified') from e) as events${sql.join(
      readNames.map((name) => sql`, (select value from ${sql.ref(name)}) as ${sql.ref(name)}`),
      sql``,
    )} from f`.execute(kysely(db))
  const row = rows[0]
  if (!row) return undefined
  const appended = (row.events ?? []).map(eventFromJson).sort((a, b) => a.id - b.id)
  const read = row as unknown as { [column: string]: unknown }
  return {
    run: toRun(row),
    events: appended,
    reads: Object.fromEntries(Object.keys(reads).map((name) => [name, read[`read_${name}`]])),
  }
}

/** The fence's renewal and the run's patch, as the `set` list of the fence's update. */
function fenceSet(fence: TransitionFence, patch: RunPatch): RawBuilder<unknown>[] {
  return Object.entries({ lease_expires_at: fence.expiresAt, ...patchColumns(patch) }).map(
    ([column, value]) => sql`${sql.ref(column)} = ${value}`,
  )
}

/** One read a transition's statement carries (a subquery built by a repository, e.g. `transcriptAfterRead`). */
export type TransitionRead = RawBuilder<unknown>

/**
 * Scalar subqueries that go with a transition, each read in the statement's snapshot (what was
 * committed before it, not its own writes): a read the next step needs costs no round trip of its own.
 */
export interface TransitionReads {
  [name: string]: TransitionRead
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
  const calls = toolCalls && toolCalls.length > 0 ? storableJson(toolCalls) : null
  return {
    sql: sql`update messages set content = ${content}, tool_calls = ${calls}::jsonb, status = ${status}
      where id = ${id} and exists (select 1 from f) returning id`,
  }
}

/** Records a model call's usage and cost with the turn that made it. */
export function insertModelCallWrite(
  run: Pick<Run, 'id' | 'conversationId' | 'projectId' | 'ownerId'>,
  model: string,
  usage: ModelCallUsage,
): TransitionWrite {
  return {
    sql: sql`insert into model_calls ${modelCallColumns} select ${modelCallValues(run, model, usage)} from f returning id`,
  }
}

/** Whose a model call is: a run's, or (`id` null) a conversation's outside any run (a forced compaction). */
export type ModelCallOwner = Pick<Run, 'conversationId' | 'projectId' | 'ownerId'> & { id: string | null }

/** The same record in the caller's transaction (a turn that failed ends its run in one; a compaction). */
export async function insertModelCall(
  db: Executor,
  run: ModelCallOwner,
  model: string,
  usage: ModelCallUsage,
): Promise<void> {
  await sql`insert into model_calls ${modelCallColumns} values (${modelCallValues(run, model, usage)})`.execute(
    kysely(db),
  )
}

const modelCallColumns = sql`(id, run_id, conversation_id, project_id, owner_id, model, input_tokens, output_tokens,
  cached_input_tokens, reasoning_tokens, cost)`

function modelCallValues(run: ModelCallOwner, model: string, usage: ModelCallUsage): RawBuilder<unknown> {
  return sql`${newId()}, ${run.id}, ${run.conversationId}, ${run.projectId}, ${run.ownerId}, ${model},
    ${usage.inputTokens}::bigint, ${usage.outputTokens}::bigint, ${usage.cachedInputTokens}::bigint,
    ${usage.reasoningTokens}::bigint, ${usage.cost}::double precision`
}

/** Inserts a turn's tool calls into the run's ledger, `pending`. */
export function insertToolCallsWrite(
  calls: Array<
    Omit<
      ToolCallRecord,
      'status' | 'output' | 'modelOutput' | 'modelTruncated' | 'dispatchId' | 'decisionId' | 'repeatOf'
    >
  >,
): TransitionWrite {
  const values = calls.map(
    (call) =>
      sql`(${call.id}, ${call.runId}, ${call.messageId}, ${call.iteration}::int, ${call.seq}::int, ${call.providerCallId}, ${call.name}, ${call.commandId}, ${call.kind}, ${call.args === null ? null : storableJson(call.args)}::jsonb, ${call.rawArgs}, ${call.risk})`,
  )
  return {
    sql: sql`insert into run_tool_calls (id, run_id, message_id, iteration, seq, provider_call_id, name, command_id, kind, args, raw_args, risk, status)
      select v.*, 'pending' from f, (values ${sql.join(values)}) as v (id, run_id, message_id, iteration, seq, provider_call_id, name, command_id, kind, args, raw_args, risk)
      returning id`,
  }
}

declare const runFenceGate: unique symbol

/**
 * A write for `finishDispatch` that changes something only when the run's fence (the statement's
 * CTE `f`) holds. Only this file builds one (`toolCallResultAfterFence`, `insertToolMessageAfterFence`),
 * so no caller has to know the CTE's name.
 */
export interface FencedWrite {
  readonly query: OperationNodeSource
  /** Its CTE returns `transcript_row`: the transcript row it wrote (`transcriptRowJson`). */
  readonly transcript?: true
  readonly [runFenceGate]: true
}

/** A run's part of a statement: its fence, and the writes and events that go only if the fence holds. */
export interface FencedPart {
  fence: TransitionFence
  writes: FencedWrite[]
  events: NewEvent[]
  /**
   * The run's next state change, carried by the same statement (the next round's opening after a
   * round's last call): its patch goes with the fence's update, then its writes, reads and events.
   */
  then?: CarriedTransition
}

/** A run's state change (`runTransition`'s parts) carried by `finishDispatch`'s statement. */
export interface CarriedTransition {
  patch: RunPatch
  writes: TransitionWrite[]
  reads: TransitionReads
  events: NewEvent[]
}

/**
 * What a carried transition wrote and read: the run as it left it, its reads (in the statement's
 * snapshot: without the statement's own writes), and the transcript rows the statement itself wrote
 * (a tool message), which those reads cannot see.
 */
export interface CarriedResult {
  run: Run
  reads: { [name: string]: unknown }
  written: unknown[]
}

/** The condition, inside `finishDispatch`'s statement, that the run's fence (CTE `f`) held. */
const runFenceHeld = sql<boolean>`exists (select 1 from f)`

function fencedWrite(query: OperationNodeSource, transcript?: true): FencedWrite {
  return { query, ...(transcript && { transcript }) } as unknown as FencedWrite
}

/**
 * A dispatch's last step with its run's answer (a driver's call), in ONE statement:
 * the dispatch row and its audit entry are written whatever happened to the run (the command ran; its
 * outcome is recorded), the run's writes and events only while its lease holds. Locks: the run's row,
 * its ledger rows, the dispatch row, the audit chain, then the event log. `fenced` says whether the
 * run's part was written. (A step with nothing of a run goes through `writeDispatchSteps`.)
 */
export async function finishDispatch(
  db: Executor,
  dispatch: OperationNodeSource,
  audit: AuditEntryInput,
  run: FencedPart,
  tag: string,
  deferFlush = false,
): Promise<{ fenced: boolean; events: EventRecord[]; flushDeferred: boolean; then?: CarriedResult }> {
  const then = run.then
  const events = then ? [...run.events, ...then.events] : run.events
  // Events reach other instances at commit: a statement with events keeps its flush before it.
  const deferred = deferFlush && events.length === 0
  const deferColumn = deferred ? sql`, ${deferFlushColumn}` : sql``
  const names = run.writes.map((_, index) => `w${index}`)
  const ctes = run.writes.map((write, index) => sql`${sql.ref(names[index]!)} as (${write.query}),`)
  // The carried transition's writes reference `f` as a transition's do.
  const carriedNames = (then?.writes ?? []).map((_, index) => `t${index}`)
  const carriedCtes = (then?.writes ?? []).map(
    (write, index) => sql`${sql.ref(carriedNames[index]!)} as (${write.sql}),`,
  )
  const readNames = Object.keys(then?.reads ?? {}).map((name) => `read_${name}`)
  const readCtes = Object.values(then?.reads ?? {}).map(
    (read, index) => sql`${sql.ref(readNames[index]!)} as (select (${read}) as value),`,
  )
  // Every write and read is done before the event log's lock is taken.
  const done = [...names, ...carriedNames, ...readNames].map(
    (name) => sql` and (select count(*) from ${sql.ref(name)}) >= 0`,
  )
  const eventsPart =
    events.length === 0
      ? sql`e as (select null::bigint as id where false)`
      : sql`lk as (select pg_advisory_xact_lock(${eventLogLock}) as locked from f where (select count(*) from audit_entry) >= 0 ${sql.join(done, sql``)}),
        e as (
          insert into events (type, project_id, conversation_id, run_id, user_id, data, size)
          select v.type, v.project_id, v.conversation_id, v.run_id, v.user_id, v.data, v.size from lk, ${eventValues(events)}
          returning id, type, project_id, conversation_id, run_id, user_id, data, created_at, pg_notify(${eventsChannel}, ${tag}) as notified)${outboxAfter(events)}`
  const transcriptNames = names.filter((_, index) => run.writes[index]!.transcript)
  const carried = then
    ? sql`, (select coalesce(json_agg(x.transcript_row), '[]'::json) from (${sql.join(
        transcriptNames.map((name) => sql`select transcript_row from ${sql.ref(name)}`),
        sql` union all `,
      )}) x) as carried_written${sql.join(
        readNames.map((name) => sql`, (select value from ${sql.ref(name)}) as ${sql.ref(name)}`),
        sql``,
      )}`
    : sql``
  const { rows } = await sql<
    Partial<RunRow> & { fenced: string; events: Array<{ [key: string]: JsonValue }> | null; carried_written?: unknown }
  >`
    with f as (
      update runs set ${sql.join(fenceSet(run.fence, then?.patch ?? {}))}
      where id = ${run.fence.runId} and lease_owner = ${run.fence.owner} and status = 'running'
      returning ${then ? sql`*` : sql`id`}
    ),
    ${sql.join(ctes, sql``)}
    ${sql.join(carriedCtes, sql``)}
    ${sql.join(readCtes, sql``)}
    d as (${dispatch}),
    ${auditAppendCtes(audit, 'd').sql},
    ${eventsPart}
    select ${then ? sql`f.*, ` : sql``}(select count(*) from f) as fenced, (select count(*) from audit_entry) as audited,
           (select jsonb_agg(to_jsonb(e.*) - 'notified') from e) as events ${carried} ${deferColumn}
    ${then ? sql`from (select) as one left join f on true` : sql``}`.execute(kysely(db))
  const row = rows[0]
  const fenced = Number(row?.fenced ?? 0) > 0
  const read = row as unknown as { [column: string]: unknown }
  return {
    fenced,
    events: (row?.events ?? []).map(eventFromJson).sort((a, b) => a.id - b.id),
    flushDeferred: deferred,
    ...(then &&
      fenced &&
      row && {
        then: {
          run: toRun(row as RunRow),
          reads: Object.fromEntries(Object.keys(then.reads).map((name) => [name, read[`read_${name}`]])),
          written: Array.isArray(row.carried_written) ? row.carried_written : [],
        },
      }),
  }
}

/** A call's ledger row (its terminal result), written only if the run's fence holds. */
export function toolCallResultAfterFence(db: Executor, callId: string, patch: ToolCallPatch): FencedWrite {
  return fencedWrite(updateToolCallQuery(db, callId, patch).where(runFenceHeld))
}

/** The tool message of a call, written only if the run's fence holds. */
export function insertToolMessageAfterFence(
  run: Pick<Run, 'id' | 'conversationId'>,
  callId: string,
  content: string,
  parts?: MessagePart[],
  id = newId(),
): FencedWrite {
  const stored = parts && parts.length > 0 ? storableJson(parts) : null
  return fencedWrite(
    sql`insert into messages (id, conversation_id, run_id, role, content, tool_call_id, status, parts)
    select ${id}, ${run.conversationId}, ${run.id}, 'tool', ${content}, ${callId}, 'completed', ${stored}::jsonb from f
    returning id, ${transcriptRowJson} as transcript_row`,
    true,
  )
}
