import { sql, type RawBuilder } from 'kysely'
import { announceAccessChange } from './access-signals.js'
import { appendEvents } from './event-log.js'
import { kysely, type Executor } from './executor.js'
import { discardWorkFiles } from './work-file-repository.js'

/**
 * What a retention sweep deletes and after how many days (docs/guides/operating.md#retention). A
 * project may set its own (`projects.retention`); the shorter of the project's and the server's applies.
 */
export interface RetentionDays {
  runEventsDays?: number
  idleConversationDays?: number
  dispatchDays?: number
  knowledgeDraftDays?: number
}

export type RetentionKind = keyof RetentionDays

export const retentionKinds: readonly RetentionKind[] = [
  'runEventsDays',
  'idleConversationDays',
  'dispatchDays',
  'knowledgeDraftDays',
]

/** A stored project retention, as far as it holds positive day counts (null: none). */
export function projectRetention(stored: unknown): RetentionDays | null {
  if (stored === null || typeof stored !== 'object') return null
  const value = stored as Record<string, unknown>
  const kept: RetentionDays = {}
  for (const kind of retentionKinds) {
    const days = value[kind]
    if (typeof days === 'number' && Number.isFinite(days) && days > 0) kept[kind] = days
  }
  return Object.keys(kept).length > 0 ? kept : null
}

/**
 * The moment before which a project's rows of `kind` are past retention: the shorter of the project's
 * days (`p` is the projects row) and the server's; null when neither sets one (so nothing compares).
 */
function cutoff(kind: RetentionKind, serverDays: number | undefined): RawBuilder<Date | null> {
  return sql<Date | null>`(now() - least((p.retention->>${kind})::float8, ${serverDays ?? null}::float8) * interval '1 day')`
}

/** Whether any project sets its own retention (a sweep with no server-wide setting has work only then). */
export async function anyProjectRetention(db: Executor): Promise<boolean> {
  const { rows } = await sql<{ found: boolean }>`
    select exists (select 1 from projects where retention is not null) as found`.execute(kysely(db))
  return rows[0]?.found === true
}

/**
 * Deletes up to `limit` events of runs ended longer ago than their project's `runEventsDays`: the
 * streams' replay of old runs. Their messages, tool calls, usage and audit entries stay. An event a
 * webhook message has yet to render (its first attempt not made) is kept until it has.
 */
export async function deleteOldRunEvents(db: Executor, serverDays: number | undefined, limit: number): Promise<number> {
  const result = await sql`
    delete from events where id in (
      select e.id from runs r
      join projects p on p.id = r.project_id
      join events e on e.run_id = r.id
      where r.ended_at < ${cutoff('runEventsDays', serverDays)}
        and not exists (select 1 from webhook_messages m where m.event_id = e.id and m.payload is null)
      limit ${limit})`.execute(kysely(db))
  return Number(result.numAffectedRows ?? 0n)
}

/**
 * Deletes up to `limit` settled dispatches last changed longer ago than `dispatchDays` (of their
 * project; the server's for a dispatch outside any project), with their decisions. Their audit entries
 * stay (until `retention.auditDays`). Call inside a transaction.
 */
export async function deleteOldDispatches(
  tx: Executor,
  serverDays: number | undefined,
  limit: number,
): Promise<number> {
  const { rows } = await sql<{ id: string }>`
    select d.id from dispatches d
    left join projects p on p.id = d.project_id
    where d.status in ('succeeded', 'failed', 'rejected', 'expired', 'cancelled')
      and d.updated_at < ${cutoff('dispatchDays', serverDays)}
      and not exists (select 1 from decisions x where x.dispatch_id = d.id and x.status = 'pending')
    limit ${limit}`.execute(kysely(tx))
  return deleteWithChildren(tx, rows, 'dispatches', ['decisions', 'dispatch_id'])
}

/**
 * Deletes up to `limit` knowledge items that are past `knowledgeDraftDays`: drafts nobody changed for
 * that long, and deleted items that long after their deletion, with their chunks. An item being
 * ingested right now is left for the next sweep. Call inside a transaction.
 */
export async function deleteStaleKnowledge(
  tx: Executor,
  serverDays: number | undefined,
  limit: number,
): Promise<number> {
  const { rows } = await sql<{ id: string }>`
    select k.id from knowledge_items k
    join projects p on p.id = k.project_id
    where ((k.status = 'draft' and k.deleted_at is null and k.updated_at < ${cutoff('knowledgeDraftDays', serverDays)})
           or k.deleted_at < ${cutoff('knowledgeDraftDays', serverDays)})
      and (k.ingest_lease_until is null or k.ingest_lease_until < now())
    limit ${limit}`.execute(kysely(tx))
  return deleteWithChildren(tx, rows, 'knowledge_items', ['knowledge_chunks', 'item_id'])
}

/** Deletes the rows (by id) of `table` and, first, the rows of the child table that refer to them. */
async function deleteWithChildren(
  tx: Executor,
  rows: Array<{ id: string }>,
  table: 'dispatches' | 'knowledge_items',
  [childTable, childColumn]: ['decisions' | 'knowledge_chunks', string],
): Promise<number> {
  if (rows.length === 0) return 0
  const ids = rows.map((row) => row.id)
  const db = kysely(tx)
  await sql`delete from ${sql.table(childTable)} where ${sql.ref(childColumn)} = any(${ids})`.execute(db)
  const result = await sql`delete from ${sql.table(table)} where id = any(${ids})`.execute(db)
  return Number(result.numAffectedRows ?? 0n)
}

/**
 * Purges up to `limit` conversations idle longer than `idleConversationDays`: no message, no run
 * started or ended, no change within it, no run still going, no enabled schedule posting into them, no
 * event a webhook has yet to render. Their messages, tool calls, events and session allowances are
 * deleted; the conversation row stays as a deleted, purged tombstone (runs and usage refer to it, so
 * budgets and usage reports keep counting), and a live one gets its `conversation.deleted` event.
 * Returns the ids purged (their work directories go next). Call inside a transaction.
 */
export async function purgeIdleConversations(
  tx: Executor,
  serverDays: number | undefined,
  limit: number,
): Promise<string[]> {
  const { rows } = await sql<{ id: string; project_id: string; owner_id: string; deleted_at: Date | null }>`
    select c.id, c.project_id, c.owner_id, c.deleted_at from conversations c
    join projects p on p.id = c.project_id
    cross join lateral (select ${cutoff('idleConversationDays', serverDays)} as at) k
    where c.purged_at is null
      and c.updated_at < k.at
      and not exists (select 1 from runs r where r.conversation_id = c.id
                      and (r.ended_at is null or r.ended_at >= k.at or r.created_at >= k.at
                           -- a run resumed after it failed keeps its first ended_at
                           or r.status in ('queued', 'running', 'requires_action')))
      and not exists (select 1 from messages m where m.conversation_id = c.id and m.created_at >= k.at)
      and not exists (select 1 from schedules s where s.target->>'conversation' = c.id
                      and s.enabled and s.deleted_at is null)
      and not exists (select 1 from webhook_messages w join events e on e.id = w.event_id
                      where e.conversation_id = c.id and w.payload is null)
    order by c.updated_at
    limit ${limit}
    for update of c skip locked`.execute(kysely(tx))
  if (rows.length === 0) return []
  const ids = rows.map((row) => row.id)
  const db = kysely(tx)
  await sql`delete from run_tool_calls where run_id in (select id from runs where conversation_id = any(${ids}))`.execute(
    db,
  )
  await sql`delete from messages where conversation_id = any(${ids})`.execute(db)
  await sql`delete from compactions where conversation_id = any(${ids})`.execute(db)
  await sql`delete from events where conversation_id = any(${ids})`.execute(db)
  await sql`delete from allowances where conversation_id = any(${ids})`.execute(db)
  await sql`delete from work_usage where conversation_id = any(${ids})`.execute(db)
  await discardWorkFiles(tx, ids)
  await sql`update runs set required_action = null, conversation_deleted = true where conversation_id = any(${ids})`.execute(
    db,
  )
  await sql`update conversations set title = '', purged_at = now(), deleted_at = coalesce(deleted_at, now())
            where id = any(${ids})`.execute(db)
  const live = rows.filter((row) => row.deleted_at === null)
  if (live.length > 0) {
    await appendEvents(
      tx,
      live.map((row) => ({
        type: 'conversation.deleted',
        projectId: row.project_id,
        conversationId: row.id,
        userId: row.owner_id,
        data: { conversationId: row.id, reason: 'retention' },
      })),
    )
    await announceAccessChange(tx, [...new Set(live.map((row) => `project:${row.project_id}` as const))])
  }
  return ids
}

/** Takes the retention sweepers' lock for this transaction (one instance sweeps at a time); false when held. */
export async function lockRetentionSweep(tx: Executor): Promise<boolean> {
  const { rows } = await sql<{ ok: boolean }>`select pg_try_advisory_xact_lock(7261524302) as ok`.execute(kysely(tx))
  return rows[0]?.ok === true
}
