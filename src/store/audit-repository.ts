import { createHash } from 'node:crypto'
import { sql } from 'kysely'
import { canonicalJson } from './canonical-json.js'
import type { Executor, JsonValue } from './database.js'
import { toPage, type Page, type PageRequest } from './page.js'

export const genesisHash = '0'.repeat(64)

export interface AuditEntryInput {
  dispatchId: string | null
  step: string
  ownerId: string | null
  projectId: string | null
  conversationId: string | null
  commandId: string | null
  entrance: string | null
  envelope: { [key: string]: JsonValue }
}

export interface AuditEntry extends AuditEntryInput {
  id: number
  prevHash: string
  hash: string
  createdAt: string
}

/** The hash an entry must carry: sha256 over the previous hash and the entry's canonical JSON (RFC 8785). */
export function hashAuditEntry(entry: Omit<AuditEntry, 'hash'>): string {
  const content = canonicalJson({
    id: entry.id,
    dispatchId: entry.dispatchId,
    step: entry.step,
    ownerId: entry.ownerId,
    projectId: entry.projectId,
    conversationId: entry.conversationId,
    commandId: entry.commandId,
    entrance: entry.entrance,
    envelope: entry.envelope,
    createdAt: entry.createdAt,
  })
  return createHash('sha256').update(`${entry.prevHash}\n${content}`).digest('hex')
}

/** The chain's tail as seen by a transaction that holds the append lock (so nobody else can move it). */
const tails = new WeakMap<object, { hash: string }>()

/**
 * Appends one entry to the chain inside the caller's transaction. The advisory lock serialises
 * appends until commit, so every entry links to the one committed just before it; a transaction's
 * later entries link to its own previous one without reading the tail again.
 */
/**
 * Takes the audit chain's lock now (it is held until the transaction ends; appending later re-enters
 * it). For transactions that may append to the audit log after other writes: taking it before the
 * event log's lock keeps one lock order everywhere (rows, audit chain, event log).
 */
export async function lockAuditLog(tx: Executor): Promise<void> {
  await sql`select pg_advisory_xact_lock(748203)`.execute(tx)
}

export async function appendAuditEntry(tx: Executor, input: AuditEntryInput): Promise<AuditEntry> {
  if (!tx.isTransaction) throw new Error('appendAuditEntry must run inside a transaction')
  let tail = tails.get(tx)
  let id: string | undefined
  if (!tail) {
    // The lock needs its own statement: a statement's snapshot predates the locks it takes.
    await sql`select pg_advisory_xact_lock(748203)`.execute(tx)
    const { rows } = await sql<{ id: string; prev: string | null }>`
      select nextval('audit_log_id_seq') as id, (select hash from audit_log order by id desc limit 1) as prev`.execute(tx)
    id = rows[0]?.id
    tail = { hash: rows[0]?.prev ?? genesisHash }
    tails.set(tx, tail)
  } else {
    const { rows } = await sql<{ id: string }>`select nextval('audit_log_id_seq') as id`.execute(tx)
    id = rows[0]?.id
  }
  const entry: Omit<AuditEntry, 'hash'> = {
    ...input,
    id: Number(id),
    prevHash: tail.hash,
    createdAt: new Date().toISOString(),
  }
  const hash = hashAuditEntry(entry)
  await tx
    .insertInto('audit_log')
    .values({
      id: String(entry.id),
      dispatch_id: entry.dispatchId,
      step: entry.step,
      owner_id: entry.ownerId,
      project_id: entry.projectId,
      conversation_id: entry.conversationId,
      command_id: entry.commandId,
      entrance: entry.entrance,
      envelope: JSON.stringify(entry.envelope),
      prev_hash: entry.prevHash,
      hash,
      created_at: entry.createdAt,
    })
    .execute()
  tail.hash = hash
  return { ...entry, hash }
}

/** Entries in chain order after `afterId` (for verification). */
export async function readAuditEntries(db: Executor, afterId: number, limit: number): Promise<AuditEntry[]> {
  const rows = await db.selectFrom('audit_log').selectAll().where('id', '>', String(afterId)).orderBy('id').limit(limit).execute()
  return rows.map(toEntry)
}

export interface AuditFilter {
  /** Dispatches on behalf of this user, or in these projects, are visible. */
  userId: string
  visibleProjectIds: string[]
  conversationId?: string
  projectId?: string
  commandId?: string
  entrance?: string
}

/** A page of dispatch ids visible under the filter, newest first, with every entry of each. */
export async function listAuditDispatches(db: Executor, filter: AuditFilter, page: PageRequest): Promise<Page<{ id: string; entries: AuditEntry[] }>> {
  let query = db
    .selectFrom('dispatches')
    .select('id')
    .where((eb) =>
      filter.visibleProjectIds.length > 0
        ? eb.or([eb('owner_id', '=', filter.userId), eb('project_id', 'in', filter.visibleProjectIds)])
        : eb('owner_id', '=', filter.userId),
    )
    .orderBy('id', 'desc')
    .limit(page.limit + 1)
  if (filter.conversationId) query = query.where('conversation_id', '=', filter.conversationId)
  if (filter.projectId) query = query.where('project_id', '=', filter.projectId)
  if (filter.commandId) query = query.where('command_id', '=', filter.commandId)
  if (filter.entrance) query = query.where('entrance', '=', filter.entrance)
  if (page.after) query = query.where('id', '<', page.after)
  const ids = toPage(await query.execute(), page.limit)
  const dispatchIds = ids.items.map((item) => item.id)
  const entries =
    dispatchIds.length === 0 ? [] : (await db.selectFrom('audit_log').selectAll().where('dispatch_id', 'in', dispatchIds).orderBy('id').execute()).map(toEntry)
  return {
    items: dispatchIds.map((id) => ({ id, entries: entries.filter((entry) => entry.dispatchId === id) })),
    nextCursor: ids.nextCursor,
  }
}

interface AuditRow {
  id: string
  dispatch_id: string | null
  step: string
  owner_id: string | null
  project_id: string | null
  conversation_id: string | null
  command_id: string | null
  entrance: string | null
  envelope: JsonValue
  prev_hash: string
  hash: string
  created_at: Date
}

function toEntry(row: AuditRow): AuditEntry {
  return {
    id: Number(row.id),
    dispatchId: row.dispatch_id,
    step: row.step,
    ownerId: row.owner_id,
    projectId: row.project_id,
    conversationId: row.conversation_id,
    commandId: row.command_id,
    entrance: row.entrance,
    envelope: row.envelope as { [key: string]: JsonValue },
    prevHash: row.prev_hash,
    hash: row.hash,
    createdAt: row.created_at.toISOString(),
  }
}

/** The envelope of a dispatch's latest entry. */
export async function lastAuditEnvelope(db: Executor, dispatchId: string): Promise<{ [key: string]: JsonValue } | undefined> {
  const row = await db.selectFrom('audit_log').select('envelope').where('dispatch_id', '=', dispatchId).orderBy('id', 'desc').limit(1).executeTakeFirst()
  return row?.envelope as { [key: string]: JsonValue } | undefined
}
