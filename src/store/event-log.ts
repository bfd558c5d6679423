import type { NewEvent } from './new-event.js'
export type { NewEvent } from './new-event.js'
import {
  sql,
  type KyselyPlugin,
  type OperationNodeSource,
  type PluginTransformQueryArgs,
  type PluginTransformResultArgs,
  type QueryResult,
  type RootOperationNode,
  type UnknownRow,
} from 'kysely'
import type { JsonValue } from './database.js'
import { storableJson } from './storable.js'
import { outboxCte } from './webhook-outbox.js'
import { kysely, type Db, type Executor } from './executor.js'

/** The channel on which committed events are announced to every server instance. */
export const eventsChannel = 'plinth_events'

/** One row of the durable event log, as streamed to clients. */
export interface EventRecord {
  id: number
  type: string
  projectId: string | null
  conversationId: string | null
  runId: string | null
  userId: string | null
  data: { [key: string]: JsonValue }
  createdAt: string
}

/**
 * A transaction's own record of the events it appends, installed on it as a (pass-through) Kysely
 * plugin by `Store.transaction`: the events are handed to the instance's feed right after commit (no
 * re-read), and their NOTIFY carries the instance's tag so that instance skips the read it would
 * otherwise do. A transaction without one notifies with an empty tag.
 */
export class AppendLog implements KyselyPlugin {
  readonly events: EventRecord[] = []

  constructor(readonly tag: string) {}

  /** `tx` with this log installed (what the transaction's callback is given). */
  install<T extends Db>(tx: T): T {
    return tx.withPlugin(this) as T
  }

  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    return args.node
  }

  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    return args.result
  }
}

function appendLogOf(tx: Executor): AppendLog | undefined {
  for (const plugin of kysely(tx).getExecutor().plugins) if (plugin instanceof AppendLog) return plugin
  return undefined
}

/** Which events a stream carries. */
export type EventScope = { projectId: string } | { conversationId: string } | { runId: string }

/**
 * Appends events inside the caller's transaction. The advisory lock is held until that transaction
 * commits, so ids are assigned and become visible in one global order: a reader that has seen id N
 * never later finds an id below N appearing. The NOTIFY is delivered on commit (and dropped on
 * rollback), waking live streams on every instance.
 */
export async function appendEvents(tx: Executor, events: NewEvent[]): Promise<EventRecord[]> {
  if (!kysely(tx).isTransaction) throw new Error('appendEvents must run inside a transaction')
  const tracking = appendLogOf(tx)
  const records = await insertEvents(tx, events, tracking?.tag ?? '')
  tracking?.events.push(...records)
  return records
}

/** Events a statement of the caller's transaction appended itself: they reach streams on commit. */
export function noteAppended(tx: Executor, records: EventRecord[]): void {
  appendLogOf(tx)?.events.push(...records)
}

/**
 * Runs `writes` (data-modifying queries with RETURNING) and appends `events`, in ONE statement inside
 * the caller's transaction: the writes finish (their rows locked) before the event log's lock is
 * taken, the order every transaction keeps.
 */
export async function appendEventsAfter(
  tx: Executor,
  writes: OperationNodeSource[],
  events: NewEvent[],
): Promise<EventRecord[]> {
  if (!kysely(tx).isTransaction) throw new Error('appendEventsAfter must run inside a transaction')
  const tracking = appendLogOf(tx)
  const names = writes.map((_, index) => `w${index}`)
  const ctes = writes.map((write, index) => sql`${sql.ref(names[index]!)} as (${write}), `)
  const done = names.map((name) => sql` and (select count(*) from ${sql.ref(name)}) >= 0`)
  const insert = sql`insert into events (type, project_id, conversation_id, run_id, user_id, data, size)
    select v.type, v.project_id, v.conversation_id, v.run_id, v.user_id, v.data, v.size from lk, ${eventValues(events)}
    returning id, type, project_id, conversation_id, run_id, user_id, data, created_at, pg_notify(${eventsChannel}, ${tracking?.tag ?? ''}) as notified`
  const outbox = outboxCte(events)
  const { rows } = await sql<EventRow>`
    with ${sql.join(ctes, sql``)}
    lk as (select pg_advisory_xact_lock(${eventLogLock}) as locked where true ${sql.join(done, sql``)})
    ${outbox ? sql`, e as (${insert}), ${outbox} select * from e` : insert}`.execute(kysely(tx))
  const records = rows.map(toEventRecord).sort((a, b) => a.id - b.id)
  tracking?.events.push(...records)
  return records
}

/** A run's lease: events appended under it are dropped once the lease has passed to someone else. */
export interface RunFence {
  runId: string
  owner: string
}

/** The event log's append lock: held until commit, so ids become visible in order. */
export const eventLogLock = 748202

/** `(values …) as v (type, project_id, conversation_id, run_id, user_id, data, size)` for an insert into events. */
export function eventValues(events: NewEvent[]) {
  const values = events.map((event) => {
    const json = storableJson(event.data)
    return sql`(${event.type}, ${event.projectId ?? null}, ${event.conversationId ?? null}, ${event.runId ?? null}, ${event.userId ?? null}, ${json}::jsonb, ${Buffer.byteLength(json)}::int)`
  })
  return sql`(values ${sql.join(values)}) as v (type, project_id, conversation_id, run_id, user_id, data, size)`
}

/** An event row as `to_jsonb` renders it (inside a larger statement's result). */
export function eventFromJson(row: { [key: string]: JsonValue }): EventRecord {
  return toEventRecord({ ...(row as unknown as EventRow), created_at: new Date(String(row.created_at)) })
}

async function insertEvents(db: Executor, events: NewEvent[], tag: string): Promise<EventRecord[]> {
  if (events.length === 0) return []
  // One round trip: the lock is taken in the FROM clause, so before any row (and its id) is produced;
  // the NOTIFY is queued by RETURNING (identical notifications in a transaction collapse into one).
  // Its payload tags the instance that will deliver these rows itself.
  const insert = sql`insert into events (type, project_id, conversation_id, run_id, user_id, data, size)
    select v.type, v.project_id, v.conversation_id, v.run_id, v.user_id, v.data, v.size
    from (select pg_advisory_xact_lock(${eventLogLock})) as lock, ${eventValues(events)}
    returning id, type, project_id, conversation_id, run_id, user_id, data, created_at, pg_notify(${eventsChannel}, ${tag}) as notified`
  // Events a webhook reports carry their outbox messages in the same statement (webhook-outbox.ts).
  const outbox = outboxCte(events)
  const { rows } =
    await sql<EventRow>`with e as (${insert})${outbox ? sql`, ${outbox}` : sql``} select * from e`.execute(kysely(db))
  return rows.map(toEventRecord).sort((a, b) => a.id - b.id)
}

/** The type of the catalog's events: in no project, and on every project and conversation stream. */
export const catalogEventType = 'commands.changed'

/**
 * The scope's events after `afterId`, at most `limit`, as a subquery: each part is read in id order
 * through its own index (a single `or` condition would make the planner walk the whole table), and
 * the catalog's events join every project and conversation scope.
 */
function scopedEvents(scope: EventScope, afterId: number, limit: number) {
  const after = String(afterId)
  if ('runId' in scope)
    return sql`(select * from events where run_id = ${scope.runId} and id > ${after} order by id limit ${limit})`
  const own =
    'projectId' in scope ? sql`project_id = ${scope.projectId}` : sql`conversation_id = ${scope.conversationId}`
  return sql`(
    (select * from events where ${own} and id > ${after} order by id limit ${limit})
    union all
    (select * from events where type = ${catalogEventType} and project_id is null and id > ${after} order by id limit ${limit})
  )`
}

/** Whether an event is the catalog's (delivered on every project and conversation stream). */
export function isCatalogEvent(event: Pick<EventRecord, 'type' | 'projectId'>): boolean {
  return event.type === catalogEventType && event.projectId === null
}

/** Events of a scope after `afterId`, oldest first. */
export async function readEvents(
  db: Executor,
  scope: EventScope,
  afterId: number,
  limit: number,
): Promise<EventRecord[]> {
  const { rows } =
    await sql<EventRow>`select * from ${scopedEvents(scope, afterId, limit)} e order by id limit ${limit}`.execute(
      kysely(db),
    )
  return rows.map(toEventRecord)
}

/**
 * A replay page: at most `limit` events of a scope after `afterId` and no more than `maxBytes` of
 * JSON data (always at least one event), so a reader of large events never holds more than its
 * budget. `more` is false when the page reached the end of the table.
 */
export async function readEventPage(
  db: Executor,
  scope: EventScope,
  afterId: number,
  limit: number,
  maxBytes: number,
): Promise<{ events: EventRecord[]; more: boolean }> {
  // Sizes (recorded at insert) are summed in the database: events past the budget are never sent here.
  const { rows } = await sql<EventRow & { through: string }>`
    select e.*, page.through from events e
    join (
      select id, sum(coalesce(size, pg_column_size(data))) over (order by id) as through, coalesce(size, pg_column_size(data)) as size
      from (select * from ${scopedEvents(scope, afterId, limit)} s order by id limit ${limit}) scoped order by id
    ) page on page.id = e.id
    where page.through - page.size < ${maxBytes}
    order by e.id`.execute(kysely(db))
  const last = rows.at(-1)
  return {
    events: rows.map(toEventRecord),
    more: rows.length === limit || (last !== undefined && Number(last.through) >= maxBytes),
  }
}

const dataJson = new WeakMap<EventRecord, string>()

/** An event's data as JSON, serialised once per record however many streams send it. */
export function eventDataJson(event: EventRecord): string {
  let json = dataJson.get(event)
  if (json === undefined) {
    json = storableJson(event.data)
    dataJson.set(event, json)
  }
  return json
}

/** Every event after `afterId`, oldest first (the live feed's read). */
export async function readAllEvents(db: Executor, afterId: number, limit: number): Promise<EventRecord[]> {
  const rows = await kysely(db)
    .selectFrom('events')
    .selectAll()
    .where('id', '>', String(afterId))
    .orderBy('id')
    .limit(limit)
    .execute()
  return rows.map(toEventRecord)
}

/**
 * The highest event id the log has handed out (its sequence, so retention deleting the newest rows
 * does not lower it): a resume point past it came from another database.
 */
export async function highestEventId(db: Executor): Promise<number> {
  const { rows } = await sql<{ last: string | null }>`
    select case when is_called then last_value else 0 end as last from events_id_seq`.execute(kysely(db))
  return Number(rows[0]?.last ?? 0)
}

export async function lastEventId(db: Executor): Promise<number> {
  const row = await kysely(db)
    .selectFrom('events')
    .select(sql<string | null>`max(id)`.as('max'))
    .executeTakeFirst()
  return Number(row?.max ?? 0)
}

interface EventRow {
  id: string
  type: string
  project_id: string | null
  conversation_id: string | null
  run_id: string | null
  user_id: string | null
  data: JsonValue
  created_at: Date
}

function toEventRecord(row: EventRow): EventRecord {
  return {
    id: Number(row.id),
    type: row.type,
    projectId: row.project_id,
    conversationId: row.conversation_id,
    runId: row.run_id,
    userId: row.user_id,
    data: row.data as { [key: string]: JsonValue },
    createdAt: row.created_at.toISOString(),
  }
}

/**
 * Where a run's log stands: its last event id, and — when its latest status is `requires_action` —
 * the id of that status event (the point a client answering it continues after).
 */
export async function runLogPoint(
  db: Executor,
  runId: string,
): Promise<{ lastId: number; waitingAt: number | null; waitingSince: number | null }> {
  // waitingSince: the first `requires_action` status since the run last had another, where its present
  // wait began (a decision answered meanwhile may have run its call and announced the wait again).
  const { rows } = await sql<{
    last: string | null
    status_id: string | null
    status: string | null
    since: string | null
  }>`
    select (select max(id) from events where run_id = ${runId}) as last, s.id as status_id, s.data->>'status' as status,
      (select min(id) from events where run_id = ${runId} and type = 'run.status' and data->>'status' = 'requires_action'
        and id > coalesce((select max(id) from events where run_id = ${runId} and type = 'run.status'
                            and data->>'status' <> 'requires_action'), 0)) as since
    from (select 1) one
    left join lateral (select id, data from events where run_id = ${runId} and type = 'run.status' order by id desc limit 1) s on true`.execute(
    kysely(db),
  )
  const row = rows[0]
  const waiting = row?.status === 'requires_action' && row.status_id !== null
  return {
    lastId: Number(row?.last ?? 0),
    waitingAt: waiting ? Number(row.status_id) : null,
    waitingSince: waiting && row.since !== null ? Number(row.since) : null,
  }
}
