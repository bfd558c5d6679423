import { createHash } from 'node:crypto'
import { sql, type RawBuilder } from 'kysely'
import { canonicalJson } from './canonical-json.js'
import type { JsonValue } from './database.js'
import { toPage, type Page, type PageRequest } from './page.js'
import { storableJson } from './storable.js'
import { kysely, type Executor } from './executor.js'

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

/** The text an entry's hash covers, after the previous hash: its canonical JSON (RFC 8785). */
function auditContent(entry: Omit<AuditEntry, 'hash' | 'prevHash'>): string {
  return canonicalJson({
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
}

/** The hash an entry must carry: sha256 over the previous hash, a newline and the entry's canonical JSON. */
export function hashAuditEntry(entry: Omit<AuditEntry, 'hash'>): string {
  return createHash('sha256')
    .update(`${entry.prevHash}\n${auditContent(entry)}`)
    .digest('hex')
}

/**
 * Takes the audit chain's lock now (held until the transaction ends; an append re-enters it). For
 * transactions that may append to the audit log after other writes: taking it before the event log's
 * lock keeps one lock order everywhere (rows, audit chain, event log).
 */
export async function lockAuditLog(tx: Executor): Promise<void> {
  await sql`select 1 from audit_chain for no key update`.execute(kysely(tx))
}

// Stands for the id in the canonical JSON the statement completes: the id is only known once the
// chain's row is locked, inside the statement.
const idMark = 987654321012345

/** An entry's canonical JSON around its id, which only the statement knows (see `idMark`). */
function contentAroundId(input: AuditEntryInput, createdAt: string): { before: string; rest: string } {
  const content = auditContent({ ...input, id: idMark, createdAt })
  // The top-level "id" follows "envelope" in canonical key order, so it is the last such key; a quote
  // inside a string value is escaped, so no value can imitate it.
  const at = content.lastIndexOf(`"id":${idMark}`)
  if (at < 0) throw new Error('audit entry content has no id')
  return { before: content.slice(0, at + '"id":'.length), rest: content.slice(at + `"id":${idMark}`.length) }
}

/**
 * The CTEs `audit_tail` and `audit_entry` that append one entry to the chain inside a larger statement:
 * they advance the chain's tail row (whose lock serialises appends until commit; a writer that waited
 * re-reads the committed tail) and insert the entry with the id and hash computed from that tail, in
 * SQL. With `after`, they write only when that CTE produced a row, and only once it has run — so the
 * row it writes is locked before the chain is (the lock order every transaction keeps).
 */
export function auditAppendCtes(
  input: AuditEntryInput,
  after?: string,
): { sql: RawBuilder<unknown>; createdAt: string } {
  return auditAppendManyCtes([input], after ? sql`where (select count(*) from ${sql.ref(after)}) > 0` : sql``)
}

/**
 * `auditAppendCtes` for several entries of one statement, chained in order. The tail row is updated
 * once (a statement can change a row only once): it advances by their number, keeps the hash before
 * them in `prev_hash`, and the entries' own hashes are computed again from it for their rows.
 * `gate` is the tail update's WHERE clause (empty: always).
 */
export function auditAppendManyCtes(
  inputs: AuditEntryInput[],
  gate: RawBuilder<unknown>,
): { sql: RawBuilder<unknown>; createdAt: string } {
  if (inputs.length === 0) throw new Error('no audit entries to append')
  const createdAt = new Date().toISOString()
  const parts = inputs.map((input) => contentAroundId(input, createdAt))
  // Entry k's hash, from the hash before the first entry and the id before it.
  const hashes = (start: RawBuilder<unknown>, baseId: RawBuilder<unknown>): RawBuilder<unknown>[] => {
    const out: RawBuilder<unknown>[] = []
    let prev = start
    parts.forEach((part, index) => {
      prev = sql`encode(sha256(convert_to(${prev} || ${'\n'} || ${part.before} || (${baseId} + ${index + 1})::text || ${part.rest}, 'UTF8')), 'hex')`
      out.push(prev)
    })
    return out
  }
  const n = inputs.length
  const tailHash = hashes(sql`hash`, sql`last_id`)[n - 1]!
  const entryHashes = hashes(sql`audit_tail.prev_hash`, sql`(audit_tail.last_id - ${n})`)
  const rows = inputs.map(
    (
      input,
      index,
    ) => sql`select audit_tail.last_id - ${n - 1 - index}, ${input.dispatchId}, ${input.step}, ${input.ownerId}, ${input.projectId},
             ${input.conversationId}, ${input.commandId}, ${input.entrance}, ${storableJson(input.envelope)}::jsonb,
             ${index === 0 ? sql`audit_tail.prev_hash` : entryHashes[index - 1]!}, ${index === n - 1 ? sql`audit_tail.hash` : entryHashes[index]!}, ${createdAt}::timestamptz
      from audit_tail`,
  )
  return {
    createdAt,
    sql: sql`audit_tail as (
      update audit_chain
      set last_id = last_id + ${n}, prev_hash = hash, hash = ${tailHash}
      ${gate}
      returning last_id, prev_hash, hash
    ),
    audit_entry as (
      insert into audit_log (id, dispatch_id, step, owner_id, project_id, conversation_id, command_id, entrance, envelope, prev_hash, hash, created_at)
      ${sql.join(rows, sql` union all `)}
      returning id, prev_hash, hash
    )`,
  }
}

/**
 * The CTEs that append, in one statement, those of `inputs` whose `dispatchId` the subquery `written`
 * yields (the rows a grouped statement did write: a dispatch whose key was taken gets no entries).
 * The chain's tail row is locked only once those rows are written (the lock order every transaction
 * keeps), with `for no key update`, which after any wait reads the tail as last committed; the
 * entries' ids and hashes are then chained from it by a recursive CTE, so the statement grows with
 * their number where `auditAppendManyCtes` nests each hash in the next. Needs `with recursive`.
 */
export function auditAppendWrittenCtes(
  inputs: AuditEntryInput[],
  written: RawBuilder<unknown>,
): { sql: RawBuilder<unknown>; createdAt: string } {
  if (inputs.length === 0) throw new Error('no audit entries to append')
  const createdAt = new Date().toISOString()
  const rows = inputs.map((input, index) => {
    const part = contentAroundId(input, createdAt)
    return sql`(${index}::int, ${input.dispatchId}::text, ${input.step}::text, ${input.ownerId}::text, ${input.projectId}::text,
      ${input.conversationId}::text, ${input.commandId}::text, ${input.entrance}::text, ${storableJson(input.envelope)}::jsonb,
      ${part.before}::text, ${part.rest}::text)`
  })
  return {
    createdAt,
    sql: sql`audit_in (k, dispatch_id, step, owner_id, project_id, conversation_id, command_id, entrance, envelope, before, rest) as (
      values ${sql.join(rows)}
    ),
    audit_ok as (
      select audit_in.*, row_number() over (order by k) as n from audit_in where dispatch_id in (${written})
    ),
    audit_lock as (
      select last_id, hash from audit_chain where (select count(*) from audit_ok) > 0 for no key update
    ),
    audit_hashes (n, id, prev_hash, hash) as (
      select 0::bigint, last_id, hash, hash from audit_lock
      union all
      select o.n, h.id + 1, h.hash,
             encode(sha256(convert_to(h.hash || ${'\n'}::text || o.before || (h.id + 1)::text || o.rest, 'UTF8')), 'hex')
      from audit_hashes h join audit_ok o on o.n = h.n + 1
    ),
    audit_tail as (
      update audit_chain set last_id = t.id, prev_hash = t.prev_hash, hash = t.hash
      from (select id, prev_hash, hash from audit_hashes order by n desc limit 1) t
      where t.id > audit_chain.last_id
      returning audit_chain.last_id
    ),
    audit_entry as (
      insert into audit_log (id, dispatch_id, step, owner_id, project_id, conversation_id, command_id, entrance, envelope, prev_hash, hash, created_at)
      select h.id, o.dispatch_id, o.step, o.owner_id, o.project_id, o.conversation_id, o.command_id, o.entrance, o.envelope,
             h.prev_hash, h.hash, ${createdAt}::timestamptz
      from audit_hashes h join audit_ok o on o.n = h.n
      returning id
    )`,
  }
}

/** Appends one entry to the chain inside the caller's transaction, in one statement (`auditAppendCtes`). */
export async function appendAuditEntry(tx: Executor, input: AuditEntryInput): Promise<AuditEntry> {
  if (!kysely(tx).isTransaction) throw new Error('appendAuditEntry must run inside a transaction')
  const append = auditAppendCtes(input)
  const { rows } = await sql<{
    id: string
    prev_hash: string
    hash: string
  }>`with ${append.sql} select * from audit_entry`.execute(kysely(tx))
  const row = rows[0]
  if (!row) throw new Error('the audit chain has no tail row')
  return { ...input, id: Number(row.id), prevHash: row.prev_hash, hash: row.hash, createdAt: append.createdAt }
}

/** The chain's tail as recorded by the last append (to detect entries removed from the end). */
export async function readAuditTail(db: Executor): Promise<{ id: number; hash: string }> {
  const row = await kysely(db).selectFrom('audit_chain').select(['last_id', 'hash']).executeTakeFirst()
  return { id: Number(row?.last_id ?? 0), hash: row?.hash ?? genesisHash }
}

/** The hash of a dispatch's latest audit entry (for its trace span). */
export async function latestAuditHashOf(db: Executor, dispatchId: string): Promise<string | undefined> {
  const row = await kysely(db)
    .selectFrom('audit_log')
    .select('hash')
    .where('dispatch_id', '=', dispatchId)
    .orderBy('id', 'desc')
    .limit(1)
    .executeTakeFirst()
  return row?.hash
}

/** Entries in chain order after `afterId` (for verification). */
export async function readAuditEntries(db: Executor, afterId: number, limit: number): Promise<AuditEntry[]> {
  const rows = await kysely(db)
    .selectFrom('audit_log')
    .selectAll()
    .where('id', '>', String(afterId))
    .orderBy('id')
    .limit(limit)
    .execute()
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
export async function listAuditDispatches(
  db: Executor,
  filter: AuditFilter,
  page: PageRequest,
): Promise<Page<{ id: string; entries: AuditEntry[] }>> {
  let query = kysely(db)
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
    dispatchIds.length === 0
      ? []
      : (
          await kysely(db)
            .selectFrom('audit_log')
            .selectAll()
            .where('dispatch_id', 'in', dispatchIds)
            .orderBy('id')
            .execute()
        ).map(toEntry)
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
export async function lastAuditEnvelope(
  db: Executor,
  dispatchId: string,
): Promise<{ [key: string]: JsonValue } | undefined> {
  const row = await kysely(db)
    .selectFrom('audit_log')
    .select('envelope')
    .where('dispatch_id', '=', dispatchId)
    .orderBy('id', 'desc')
    .limit(1)
    .executeTakeFirst()
  return row?.envelope as { [key: string]: JsonValue } | undefined
}
