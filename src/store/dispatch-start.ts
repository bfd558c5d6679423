import { sql, type OperationNodeSource } from 'kysely'
import { auditAppendManyCtes, type AuditEntryInput } from './audit-repository.js'
import type { JsonValue } from './database.js'
import type { NewDispatch } from './dispatch-repository.js'
import {
  eventFromJson,
  eventLogLock,
  eventsChannel,
  eventValues,
  type EventRecord,
  type NewEvent,
} from './event-log.js'
import { updateToolCallQuery } from './tool-call-repository.js'
import type { TransitionFence } from './run-transition.js'
import { storableJson } from './storable.js'
import { deferFlushColumn } from './wal-flush.js'
import { outboxAfter } from './webhook-outbox.js'
import { kysely, type Executor } from './executor.js'

/** A dispatch that starts running as it is recorded (no human had to be asked). */
export interface StartingDispatch extends NewDispatch {
  decisionId: string | null
  executor: { id: string; expiresAt: Date }
}

/** The columns of a dispatch recorded already `running`, as `startingDispatchRow` lists its values. */
export const startingDispatchColumns = sql`(id, command_id, plugin, plugin_version, entrance, actor, owner_id, project_id, conversation_id,
  run_id, call_id, idempotency_key, params, params_hash, request_hash, risk, status, decision_id, executor, executor_expires_at)`

/** The values of a dispatch recorded already `running`, for a `select` or a `values` row. */
export function startingDispatchRow(dispatch: StartingDispatch) {
  const json = (value: JsonValue) => storableJson(value)
  return sql`${dispatch.id}::text, ${dispatch.commandId}::text, ${dispatch.plugin}::text, ${dispatch.pluginVersion}::text, ${dispatch.entrance}::text,
    ${json(dispatch.actor as unknown as JsonValue)}::jsonb, ${dispatch.ownerId}::text, ${dispatch.projectId}::text, ${dispatch.conversationId}::text,
    ${dispatch.runId}::text, ${dispatch.callId}::text, ${dispatch.idempotencyKey}::text, ${json(dispatch.params)}::jsonb, ${dispatch.paramsHash}::text,
    ${dispatch.requestHash}::text, ${dispatch.risk}::text, 'running', ${dispatch.decisionId}::text, ${dispatch.executor.id}::text,
    ${dispatch.executor.expiresAt}::timestamptz`
}

declare const dispatchGate: unique symbol

/**
 * A write for `insertDispatchStarted` that changes something only when the dispatch was recorded (the
 * statement's CTE `d`, which itself needs the run's fence). Only this file builds one.
 */
export interface DispatchGatedWrite {
  readonly query: OperationNodeSource
  readonly [dispatchGate]: true
}

/** A run's part of a dispatch's first statement: its fence, and the writes and events that go only if the dispatch was recorded. */
export interface DispatchStartPart {
  fence: TransitionFence
  writes: DispatchGatedWrite[]
  events: NewEvent[]
}

/** The condition, inside `insertDispatchStarted`'s statement, that the dispatch was recorded (CTE `d`). */
const dispatchRecorded = sql<boolean>`exists (select 1 from d)`

/** The call marked `running` (it starts now), written only if its dispatch was recorded. */
export function toolCallStartedWithDispatch(db: Executor, callId: string): DispatchGatedWrite {
  return {
    query: updateToolCallQuery(db, callId, { status: 'running', started: true }).where(dispatchRecorded),
  } as unknown as DispatchGatedWrite
}

/**
 * Records a driver's dispatch that runs at once — its row (already `running`) and its audit entries
 * (`requested`, `running`) — in ONE statement, instead of a transaction of four, only while the run's
 * lease holds (a driver that lost it dispatches nothing), with the run's writes and events, which go
 * only if the dispatch was recorded. (A dispatch without a run's part goes through `writeDispatchSteps`.) Locks: the run's row, the dispatch row, the run's rows, the audit chain, the event log.
 * `inserted` is false when the idempotency key was already taken (nothing was written).
 */
export async function insertDispatchStarted(
  db: Executor,
  dispatch: StartingDispatch,
  audits: AuditEntryInput[],
  run: DispatchStartPart,
  tag: string,
  deferFlush = false,
): Promise<{ fenced: boolean; inserted: boolean; events: EventRecord[]; flushDeferred: boolean }> {
  const writes = run.writes
  const names = writes.map((_, index) => `w${index}`)
  const ctes = writes.map((write, index) => sql`${sql.ref(names[index]!)} as (${write.query}),`)
  const done = names.map((name) => sql` and (select count(*) from ${sql.ref(name)}) >= 0`)
  const events = run.events
  // Events reach other instances at commit: a statement with events keeps its flush before it.
  const deferred = deferFlush && events.length === 0
  const eventsPart =
    events.length === 0
      ? sql`e as (select null::bigint as id where false)`
      : sql`lk as (select pg_advisory_xact_lock(${eventLogLock}) as locked from d where (select count(*) from audit_entry) >= 0),
        e as (
          insert into events (type, project_id, conversation_id, run_id, user_id, data, size)
          select v.type, v.project_id, v.conversation_id, v.run_id, v.user_id, v.data, v.size from lk, ${eventValues(events)}
          returning id, type, project_id, conversation_id, run_id, user_id, data, created_at, pg_notify(${eventsChannel}, ${tag}) as notified)${outboxAfter(events)}`
  const { rows } = await sql<{ fenced: string; inserted: string; events: Array<{ [key: string]: JsonValue }> | null }>`
    with f as (
      update runs set lease_expires_at = ${run.fence.expiresAt}
      where id = ${run.fence.runId} and lease_owner = ${run.fence.owner} and status = 'running'
      returning id
    ),
    d as (
      insert into dispatches ${startingDispatchColumns}
      select ${startingDispatchRow(dispatch)}
      from f
      on conflict (owner_id, idempotency_key) where idempotency_key is not null do nothing
      returning id
    ),
    ${sql.join(ctes, sql``)}
    ${auditAppendManyCtes(audits, sql`where (select count(*) from d) > 0 ${sql.join(done, sql``)}`).sql},
    ${eventsPart}
    select (select count(*) from f) as fenced, (select count(*) from d) as inserted,
           (select count(*) from audit_entry) as audited, (select jsonb_agg(to_jsonb(e.*) - 'notified') from e) as events
           ${deferred ? sql`, ${deferFlushColumn}` : sql``}`.execute(kysely(db))
  const row = rows[0]
  return {
    fenced: Number(row?.fenced ?? 0) > 0,
    inserted: Number(row?.inserted ?? 0) > 0,
    events: (row?.events ?? []).map(eventFromJson).sort((a, b) => a.id - b.id),
    flushDeferred: deferred,
  }
}
