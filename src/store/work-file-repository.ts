import { sql } from 'kysely'
import { kysely, type Executor } from './executor.js'

/** One file of a conversation's stored work directory (docs/guides/scaling.md#files). */
export interface StoredWorkFile {
  path: string
  /** SHA-256 of the content, hex: the blob that holds it. */
  hash: string
  size: number
  /** When the file was last written (ms since the epoch), where it was written: every copy shows it. */
  modifiedAt?: number
}

/** What a manifest change does: files to name (new or replaced) and paths to drop (each with what is under it). */
export interface WorkFileChange {
  put: readonly StoredWorkFile[]
  remove: readonly string[]
}

/**
 * Of `conversationIds`, those deleted (their files go with them), retention purged, or that do not exist
 * (in this database): an instance's cached copies of their files are to go (docs/guides/scaling.md#files).
 */
export async function purgedConversationIds(db: Executor, conversationIds: readonly string[]): Promise<string[]> {
  if (conversationIds.length === 0) return []
  const { rows } = await sql<{ id: string }>`
    select x.id from unnest(${[...conversationIds]}::text[]) as x (id)
    left join conversations c on c.id = x.id
    where c.id is null or c.deleted_at is not null or c.purged_at is not null`.execute(kysely(db))
  return rows.map((row) => row.id)
}

/** The version of a conversation's stored files (0: nothing was ever stored). */
export async function workFilesVersion(db: Executor, conversationId: string): Promise<number> {
  const row = await kysely(db)
    .selectFrom('work_manifests')
    .select('version')
    .where('conversation_id', '=', conversationId)
    .executeTakeFirst()
  return row ? Number(row.version) : 0
}

/** Every stored file of a conversation, with the version they are at (read in one statement). */
export async function workFileManifest(
  db: Executor,
  conversationId: string,
): Promise<{ version: number; files: StoredWorkFile[] }> {
  const { rows } = await sql<{
    path: string | null
    hash: string | null
    size: string | null
    modified_ms: string | null
    version: string
  }>`
    select f.path, f.hash, f.size, (extract(epoch from f.modified_at) * 1000)::float8 as modified_ms,
           coalesce(m.version, 0) as version
    from (select ${conversationId}::text as id) c
    left join work_manifests m on m.conversation_id = c.id
    left join work_files f on f.conversation_id = c.id`.execute(kysely(db))
  return {
    version: Number(rows[0]?.version ?? 0),
    files: rows.flatMap((row) =>
      row.path === null
        ? []
        : [{ path: row.path, hash: row.hash!, size: Number(row.size), modifiedAt: Number(row.modified_ms) }],
    ),
  }
}

/**
 * Marks a blob as wanted: true when it is stored (its age reset), false when its bytes must be stored
 * first (`storeWorkBlob`).
 */
export async function touchWorkBlob(db: Executor, hash: string): Promise<boolean> {
  const result = await sql`update work_blobs set wanted_at = now() where hash = ${hash}`.execute(kysely(db))
  return Number(result.numAffectedRows ?? 0) > 0
}

/** Stores a blob's chunks (in one transaction of the caller's); a blob stored meanwhile is kept as it is. */
export async function storeWorkBlob(
  tx: Executor,
  hash: string,
  size: number,
  chunks: AsyncIterable<Buffer>,
): Promise<void> {
  const db = kysely(tx)
  const inserted = await sql`insert into work_blobs (hash, size) values (${hash}, ${size})
    on conflict (hash) do nothing`.execute(db)
  if (Number(inserted.numAffectedRows ?? 0) === 0) return
  let seq = 0
  for await (const chunk of chunks) {
    await sql`insert into work_blob_chunks (hash, seq, data) values (${hash}, ${seq++}, ${chunk})`.execute(db)
  }
}

/** A stored blob's bytes, chunk by chunk (a few chunks per statement, never the whole blob at once). */
export async function* readWorkBlob(db: Executor, hash: string): AsyncGenerator<Buffer> {
  let next = 0
  for (;;) {
    const { rows } = await sql<{ seq: number; data: Uint8Array }>`
      select seq, data from work_blob_chunks where hash = ${hash} and seq >= ${next} order by seq limit 4`.execute(
      kysely(db),
    )
    for (const row of rows) yield Buffer.from(row.data.buffer, row.data.byteOffset, row.data.byteLength)
    if (rows.length < 4) return
    next = rows.at(-1)!.seq + 1
  }
}

/**
 * Applies a change to a conversation's manifest in one transaction of the caller's and answers the
 * version before and after. Blobs no file names any more are deleted with it.
 */
export async function commitWorkFiles(
  tx: Executor,
  conversationId: string,
  change: WorkFileChange,
): Promise<{ previous: number; version: number }> {
  const db = kysely(tx)
  const { rows } = await sql<{ version: string }>`
    insert into work_manifests (conversation_id, version) values (${conversationId}, 1)
    on conflict (conversation_id) do update set version = work_manifests.version + 1
    returning version`.execute(db)
  const version = Number(rows[0]!.version)
  const dropped: string[] = []
  for (const path of change.remove) {
    const removed = await sql<{ hash: string }>`
      delete from work_files where conversation_id = ${conversationId}
        and (path = ${path} or (${path} = '' or starts_with(path, ${path + '/'})))
      returning hash`.execute(db)
    dropped.push(...removed.rows.map((row) => row.hash))
  }
  for (const file of change.put) {
    const replaced = await sql<{ hash: string | null }>`
      with old as (select hash from work_files where conversation_id = ${conversationId} and path = ${file.path})
      insert into work_files (conversation_id, path, hash, size, modified_at)
      values (${conversationId}, ${file.path}, ${file.hash}, ${file.size},
              coalesce(to_timestamp(${validTime(file.modifiedAt)}::float8 / 1000), now()))
      on conflict (conversation_id, path) do update set hash = excluded.hash, size = excluded.size, modified_at = excluded.modified_at
      returning (select hash from old) as hash`.execute(db)
    const old = replaced.rows[0]?.hash
    if (old && old !== file.hash) dropped.push(old)
  }
  await dropUnnamedBlobs(tx, dropped)
  return { previous: version - 1, version }
}

/** Deletes the blobs among `hashes` that no file names. */
async function dropUnnamedBlobs(tx: Executor, hashes: readonly string[]): Promise<void> {
  if (hashes.length === 0) return
  await sql`delete from work_blobs b where b.hash = any(${[...new Set(hashes)]}::text[])
    and not exists (select 1 from work_files f where f.hash = b.hash)`.execute(kysely(tx))
}

/**
 * Forgets the files and recorded usage of up to `limit` deleted conversations with no run going (narrowed
 * to one conversation or project just deleted), in the caller's transaction; answers their ids (their
 * directories go next). Their room is the user's again (docs/guides/sandbox.md, "Quotas and uploads"). Found by
 * their usage rows: every write records usage, a late one (an execution finishing elsewhere) included.
 */
export async function dropDeletedWork(
  tx: Executor,
  limit: number,
  scope: { conversationId: string } | { projectId: string } | Record<string, never> = {},
): Promise<string[]> {
  const narrowed =
    'conversationId' in scope
      ? sql`and c.id = ${scope.conversationId}`
      : 'projectId' in scope
        ? sql`and c.project_id = ${scope.projectId}`
        : sql``
  const { rows } = await sql<{ id: string }>`
    select u.conversation_id as id from work_usage u
    join conversations c on c.id = u.conversation_id
    where c.deleted_at is not null ${narrowed}
      and not exists (select 1 from runs r where r.conversation_id = c.id
                      and r.status in ('queued', 'running', 'requires_action'))
    limit ${limit}
    for update of u skip locked`.execute(kysely(tx))
  const ids = rows.map((row) => row.id)
  if (ids.length === 0) return []
  await sql`delete from work_usage where conversation_id = any(${ids}::text[])`.execute(kysely(tx))
  await discardWorkFiles(tx, ids)
  return ids
}

/** Forgets every stored file of conversations (deleted or purged), in the caller's transaction. */
export async function discardWorkFiles(tx: Executor, conversationIds: readonly string[]): Promise<void> {
  if (conversationIds.length === 0) return
  const { rows } = await sql<{ hash: string }>`
    delete from work_files where conversation_id = any(${conversationIds}::text[]) returning hash`.execute(kysely(tx))
  await sql`update work_manifests set version = version + 1 where conversation_id = any(${conversationIds}::text[])`.execute(
    kysely(tx),
  )
  await dropUnnamedBlobs(
    tx,
    rows.map((row) => row.hash),
  )
}

/**
 * Deletes up to `limit` blobs no file names that were last wanted over an hour ago: content a sync stored
 * and never named (its instance died between the two). Younger ones may be about to be named.
 */
export async function deleteUnnamedWorkBlobs(tx: Executor, limit: number): Promise<number> {
  const result = await sql`delete from work_blobs where hash in (
      select b.hash from work_blobs b
      where b.wanted_at < now() - interval '1 hour'
        and not exists (select 1 from work_files f where f.hash = b.hash)
      limit ${limit})`.execute(kysely(tx))
  return Number(result.numAffectedRows ?? 0)
}

/** A file time the database can hold (a program can set any, e.g. year -10706 on tmpfs); else none (now). */
function validTime(ms: number | undefined): number | null {
  // 1901 to 9999: what every file system and timestamptz agree on.
  return ms !== undefined && Number.isFinite(ms) && ms >= -2_177_452_800_000 && ms < 253_402_300_800_000 ? ms : null
}
