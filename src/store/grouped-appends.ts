import { sql } from 'kysely'
import type { JsonValue } from './database.js'
import {
  eventFromJson,
  eventLogLock,
  eventsChannel,
  type EventRecord,
  type NewEvent,
  type RunFence,
} from './event-log.js'
import { storableJson } from './storable.js'
import { outboxAfter } from './webhook-outbox.js'
import { kysely, type Executor } from './executor.js'
import { GroupCommit } from './group-commit.js'

/** One caller's append: its events, and the run lease they are written under (if any). */
export interface AppendItem {
  events: NewEvent[]
  fence?: RunFence
}

/**
 * Appends the events of several callers in ONE statement (its own transaction): the event log's lock
 * is taken once, and there is one commit and one WAL flush for all of them. Each item's fence is
 * checked on its run's row as last committed, under a share lock taken before the event log's (rows
 * are locked in id order): a plain read's snapshot predates its lock waits, so a delta queued behind a
 * cancel's `message.completed` would pass the fence after it. An item whose lease has passed writes
 * nothing. Returns each item's records, in its order.
 */
export async function appendGrouped(db: Executor, items: AppendItem[], tag: string): Promise<EventRecord[][]> {
  const fenced = [...new Set(items.flatMap((item) => (item.fence ? [item.fence.runId] : [])))]
  const rows = items.flatMap((item, index) =>
    item.events.map((event, order) => {
      const json = storableJson(event.data)
      return sql`(${index}::int, ${order}::int, ${item.fence?.runId ?? null}::text, ${item.fence?.owner ?? null}::text,
        ${event.type}::text, ${event.projectId ?? null}::text, ${event.conversationId ?? null}::text, ${event.runId ?? null}::text,
        ${event.userId ?? null}::text, ${json}::jsonb, ${Buffer.byteLength(json)}::int)`
    }),
  )
  const events = items.flatMap((item) => item.events)
  const fence =
    fenced.length > 0
      ? sql`select id, lease_owner from runs where id in (${sql.join(fenced)}) and status = 'running' order by id for share`
      : sql`select null::text as id, null::text as lease_owner where false`
  // The values are written in (item, order) order, so their ids are too: `written` lists the items
  // whose fence held, and each takes as many of the ids, in turn, as it has events.
  const { rows: result } = await sql<{ events: Array<{ [key: string]: JsonValue }> | null; written: number[] | null }>`
    with f as (${fence}),
    v (item, ord, fence_run, fence_owner, type, project_id, conversation_id, run_id, user_id, data, size) as (values ${sql.join(rows)}),
    ok as (
      select * from v
      where v.fence_run is null or exists (select 1 from f where f.id = v.fence_run and f.lease_owner = v.fence_owner)
    ),
    lk as (select pg_advisory_xact_lock(${eventLogLock}) as locked from (select count(*) from f) c),
    e as (
      insert into events (type, project_id, conversation_id, run_id, user_id, data, size)
      select ok.type, ok.project_id, ok.conversation_id, ok.run_id, ok.user_id, ok.data, ok.size
      from lk, ok order by ok.item, ok.ord
      returning id, type, project_id, conversation_id, run_id, user_id, data, created_at, pg_notify(${eventsChannel}, ${tag}) as notified
    )${outboxAfter(events)}
    select (select jsonb_agg(to_jsonb(e.*) - 'notified' order by e.id) from e) as events,
           (select array_agg(distinct ok.item order by ok.item) from ok) as written`.execute(kysely(db))
  const records = (result[0]?.events ?? []).map(eventFromJson)
  const written = new Set(result[0]?.written ?? [])
  let next = 0
  return items.map((item, index) => {
    if (!written.has(index)) return []
    const own = records.slice(next, next + item.events.length)
    next += item.events.length
    own.forEach((record, order) => {
      const event = item.events[order]!
      if (record.type !== event.type || record.runId !== (event.runId ?? null))
        throw new Error('grouped append: the ids came back out of order')
    })
    return own
  })
}

/**
 * Group commit for appends that change nothing else (streamed deltas, a program's output): one
 * statement is in flight at a time, and the appends that arrive meanwhile share the next one
 * (docs/architecture.md#the-event-log). Alone, an append goes at once, as before; under load, many
 * runs' deltas cost one lock, one commit and one flush instead of one each.
 */
export class GroupedAppends {
  readonly #group: GroupCommit<AppendItem, EventRecord[]>

  /**
   * `write` runs one statement for a group (`appendGrouped`); `committed` gets every event of a
   * committed group in id order, before any caller is answered.
   */
  constructor(
    write: (items: AppendItem[]) => Promise<EventRecord[][]>,
    committed: (events: EventRecord[]) => void,
    options: { maxEvents?: number } = {},
  ) {
    this.#group = new GroupCommit(write, {
      size: (item) => item.events.length,
      maxSize: options.maxEvents ?? 500,
      committed: (records) => {
        committed(records.flat().sort((a, b) => a.id - b.id))
      },
    })
  }

  append(events: NewEvent[], fence?: RunFence): Promise<EventRecord[]> {
    if (events.length === 0) return Promise.resolve([])
    return this.#group.submit({ events, ...(fence && { fence }) })
  }
}
