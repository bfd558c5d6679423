import { sql, type RawBuilder } from 'kysely'
import type { IngestStatus, JsonValue, KnowledgeStatus } from './database.js'
import { appendEvents } from './event-log.js'
import { newId } from './ids.js'
import { toPage, type Page, type PageRequest } from './page.js'
import { executorOf, kysely, type Executor } from './executor.js'

/** A knowledge item as the API shows it (never its body or upload). */
export interface KnowledgeItem {
  id: string
  projectId: string
  ownerId: string
  title: string
  status: KnowledgeStatus
  ingestStatus: IngestStatus
  ingestError: string | null
  source: 'text' | 'file' | 'command'
  filename: string | null
  mediaType: string | null
  byteSize: number
  chunkCount: number
  createdAt: string
  updatedAt: string
  publishedAt: string | null
}

export interface NewKnowledgeItem {
  projectId: string
  ownerId: string
  title: string
  source: KnowledgeItem['source']
  filename?: string | null
  mediaType?: string | null
  byteSize: number
  body?: string | null
  upload?: Uint8Array | null
  /** Where the upload waits on disk instead (the embedded database). */
  uploadPath?: string | null
}

/** A chunk ready to store: text, its full-text vector (a tsvector literal) and its embedding. */
export interface NewChunk {
  seq: number
  heading: string
  text: string
  /** tsvector input syntax (`'lexeme':1,4 …`), built without the database's parser. */
  search: string
  embedding: readonly number[]
}

export interface KnowledgeChunk {
  id: string
  itemId: string
  seq: number
  heading: string
  text: string
}

/** Which chunks a search may see: the actor's own in some projects, others' published ones in others. */
export interface ChunkScope {
  own?: { ownerId: string; projectIds: readonly string[] }
  shared?: { actorId: string; projectIds: readonly string[] }
}

/** A chunk a search found, with its rank on that path (1 = best). */
export interface ChunkHit {
  chunkId: string
  itemId: string
  projectId: string
  ownerId: string
  title: string
  heading: string
  text: string
  seq: number
  /** ts_rank_cd for the full-text path, cosine similarity for the vector path. */
  score: number
}

const itemColumns = [
  'id',
  'project_id',
  'owner_id',
  'title',
  'status',
  'ingest_status',
  'ingest_error',
  'source',
  'filename',
  'media_type',
  'byte_size',
  'chunk_count',
  'created_at',
  'updated_at',
  'published_at',
] as const

/** Creates an item (pending ingestion) and announces it on the project stream. */
export async function insertKnowledgeItem(tx: Executor, input: NewKnowledgeItem): Promise<KnowledgeItem> {
  const row = await kysely(tx)
    .insertInto('knowledge_items')
    .values({
      id: newId(),
      project_id: input.projectId,
      owner_id: input.ownerId,
      title: input.title,
      source: input.source,
      filename: input.filename ?? null,
      media_type: input.mediaType ?? null,
      byte_size: input.byteSize,
      body: input.body ?? null,
      upload: input.upload ?? null,
      upload_path: input.uploadPath ?? null,
    })
    .returning(itemColumns)
    .executeTakeFirstOrThrow()
  const item = toItem(row)
  await appendEvents(tx, [knowledgeEvent('knowledge.created', item)])
  return item
}

export async function getKnowledgeItem(db: Executor, id: string): Promise<KnowledgeItem | undefined> {
  const row = await kysely(db)
    .selectFrom('knowledge_items')
    .select(itemColumns)
    .where('id', '=', id)
    .where('deleted_at', 'is', null)
    .executeTakeFirst()
  return row && toItem(row)
}

/** A project's items a viewer may list: every published item and the viewer's own drafts; newest first. */
export async function listKnowledgeItems(
  db: Executor,
  projectId: string,
  viewerId: string,
  page: PageRequest,
): Promise<Page<KnowledgeItem>> {
  let query = kysely(db)
    .selectFrom('knowledge_items')
    .select(itemColumns)
    .where('project_id', '=', projectId)
    .where('deleted_at', 'is', null)
    .where((eb) => eb.or([eb('status', '=', 'published'), eb('owner_id', '=', viewerId)]))
    .orderBy('id', 'desc')
    .limit(page.limit + 1)
  if (page.after) query = query.where('id', '<', page.after)
  return toPage((await query.execute()).map(toItem), page.limit)
}

/**
 * Takes a pending item for ingestion (one instance at a time: a lease), with what it is made of, and
 * counts the attempt (`attempt` fences what this claim writes). Undefined when it is not pending,
 * deleted, or another instance holds its lease.
 */
export async function claimKnowledgeIngest(
  db: Executor,
  id: string,
  leaseMs: number,
): Promise<
  | { item: KnowledgeItem; body: string | null; upload: Uint8Array | null; uploadPath: string | null; attempt: number }
  | undefined
> {
  const row = await kysely(db)
    .updateTable('knowledge_items')
    .set({ ingest_lease_until: new Date(Date.now() + leaseMs), ingest_attempts: sql`ingest_attempts + 1` })
    .where('id', '=', id)
    .where('ingest_status', '=', 'pending')
    .where('deleted_at', 'is', null)
    .where((eb) => eb.or([eb('ingest_lease_until', 'is', null), eb('ingest_lease_until', '<', new Date())]))
    .returning([...itemColumns, 'body', 'upload', 'upload_path', 'ingest_attempts'])
    .executeTakeFirst()
  if (!row) return undefined
  return {
    item: toItem(row),
    body: row.body,
    upload: row.upload,
    uploadPath: row.upload_path,
    attempt: row.ingest_attempts,
  }
}

/** Upload files still waiting for ingestion (any file of the uploads directory not named here is left over). */
export async function pendingUploadPaths(db: Executor): Promise<Set<string>> {
  const rows = await kysely(db)
    .selectFrom('knowledge_items')
    .select('upload_path')
    .where('upload_path', 'is not', null)
    .execute()
  return new Set(rows.map((row) => row.upload_path!))
}

/** Ids of items waiting for ingestion whose lease (if any) ran out, oldest first. */
export async function pendingKnowledgeItemIds(db: Executor, limit: number): Promise<string[]> {
  const rows = await kysely(db)
    .selectFrom('knowledge_items')
    .select('id')
    .where('ingest_status', '=', 'pending')
    .where('deleted_at', 'is', null)
    .where((eb) => eb.or([eb('ingest_lease_until', 'is', null), eb('ingest_lease_until', '<', new Date())]))
    .orderBy('id')
    .limit(limit)
    .execute()
  return rows.map((row) => row.id)
}

/** Stores an item's chunks and marks it ready, in the caller's transaction (the upload is dropped). */
export async function finishKnowledgeIngest(
  tx: Executor,
  itemId: string,
  body: string,
  chunks: readonly NewChunk[],
): Promise<KnowledgeItem | undefined> {
  const item = await kysely(tx)
    .updateTable('knowledge_items')
    .set({
      ingest_status: 'ready',
      ingest_error: null,
      body,
      upload: null,
      chunk_count: chunks.length,
      ingest_lease_until: null,
      updated_at: new Date(),
    })
    .where('id', '=', itemId)
    .where('deleted_at', 'is', null)
    .returning(itemColumns)
    .executeTakeFirst()
  if (!item) return undefined
  const ready = toItem(item)
  await insertChunks(tx, ready, chunks)
  await appendEvents(tx, [knowledgeEvent('knowledge.ingested', ready)])
  return ready
}

async function insertChunks(tx: Executor, item: KnowledgeItem, chunks: readonly NewChunk[]): Promise<void> {
  // Batches keep each statement's parameter count well under the protocol's limit.
  for (let start = 0; start < chunks.length; start += 500) {
    const values = chunks
      .slice(start, start + 500)
      .map(
        (chunk) =>
          sql`(${newId()}, ${item.id}, ${item.projectId}, ${item.ownerId}, ${item.status === 'published'}, ${chunk.seq}, ${chunk.heading}, ${chunk.text}, ${chunk.search}::tsvector, ${vectorLiteral(chunk.embedding)}::vector)`,
      )
    await sql`insert into knowledge_chunks (id, item_id, project_id, owner_id, published, seq, heading, text, search, embedding) values ${sql.join(values)}`.execute(
      kysely(tx),
    )
  }
}

/**
 * Stores one batch of a claimed item's chunks, fenced by the claim: nothing is written once the item
 * was deleted, finished, failed or claimed again (`attempt` is no longer its count). Returns how many
 * chunks were stored (0: stop). Each batch is its own statement, so a large item never holds the
 * database in one long transaction. The item's row is share-locked: a delete committing meanwhile is
 * waited for and seen, so no chunk outlives its deleted item.
 */
export async function insertKnowledgeChunkBatch(
  db: Executor,
  itemId: string,
  attempt: number,
  chunks: readonly NewChunk[],
): Promise<number> {
  if (chunks.length === 0) return 0
  const values = chunks.map(
    (chunk) =>
      sql`(${newId()}, ${chunk.seq}::integer, ${chunk.heading}, ${chunk.text}, ${chunk.search}::tsvector, ${vectorLiteral(chunk.embedding)}::vector)`,
  )
  const result = await sql`
    insert into knowledge_chunks (id, item_id, project_id, owner_id, published, seq, heading, text, search, embedding)
    select v.id, i.id, i.project_id, i.owner_id, i.status = 'published', v.seq, v.heading, v.text, v.search, v.embedding
    from (values ${sql.join(values)}) as v (id, seq, heading, text, search, embedding)
    join knowledge_items i on i.id = ${itemId} and i.ingest_status = 'pending' and i.deleted_at is null and i.ingest_attempts = ${attempt}
    for share of i`.execute(kysely(db))
  return Number(result.numAffectedRows ?? 0)
}

/** Extends a claim's lease; false when the claim is no longer the item's (stop). */
export async function renewKnowledgeLease(
  db: Executor,
  itemId: string,
  attempt: number,
  leaseMs: number,
): Promise<boolean> {
  const result = await kysely(db)
    .updateTable('knowledge_items')
    .set({ ingest_lease_until: new Date(Date.now() + leaseMs) })
    .where('id', '=', itemId)
    .where('ingest_status', '=', 'pending')
    .where('deleted_at', 'is', null)
    .where('ingest_attempts', '=', attempt)
    .executeTakeFirst()
  return Number(result.numUpdatedRows) > 0
}

/**
 * Gives an item back after a graceful stop cut its ingestion short: the lease is let go and the attempt
 * uncounted (the item did nothing wrong), so the next poll here or on another instance takes it at once.
 */
export async function releaseKnowledgeIngest(db: Executor, itemId: string, attempt: number): Promise<void> {
  await kysely(db)
    .updateTable('knowledge_items')
    .set({ ingest_lease_until: null, ingest_attempts: sql`ingest_attempts - 1` })
    .where('id', '=', itemId)
    .where('ingest_status', '=', 'pending')
    .where('ingest_attempts', '=', attempt)
    .execute()
}

/** Deletes up to `limit` of an item's chunks (a bounded statement; call until it returns 0). */
export async function deleteKnowledgeChunkBatch(db: Executor, itemId: string, limit: number): Promise<number> {
  const result =
    await sql`delete from knowledge_chunks where id in (select id from knowledge_chunks where item_id = ${itemId} limit ${limit})`.execute(
      kysely(db),
    )
  return Number(result.numAffectedRows ?? 0)
}

/** Marks a claimed item ready once its chunks are stored (the upload is dropped), fenced by the claim. */
export async function completeKnowledgeIngest(
  tx: Executor,
  itemId: string,
  attempt: number,
  body: string,
  chunkCount: number,
): Promise<KnowledgeItem | undefined> {
  const row = await kysely(tx)
    .updateTable('knowledge_items')
    .set({
      ingest_status: 'ready',
      ingest_error: null,
      body,
      upload: null,
      upload_path: null,
      chunk_count: chunkCount,
      ingest_lease_until: null,
      updated_at: new Date(),
    })
    .where('id', '=', itemId)
    .where('ingest_status', '=', 'pending')
    .where('deleted_at', 'is', null)
    .where('ingest_attempts', '=', attempt)
    .returning(itemColumns)
    .executeTakeFirst()
  if (!row) return undefined
  const ready = toItem(row)
  await appendEvents(tx, [knowledgeEvent('knowledge.ingested', ready)])
  return ready
}

/** Bytes of knowledge a user holds: the sizes of their items that are not deleted. */
/**
 * Holds, until the transaction ends, the right to add to a user's knowledge: two additions checked
 * against the volume limit at once would each see room for itself.
 */
export async function lockKnowledgeVolume(tx: Executor, ownerId: string): Promise<void> {
  await sql`select pg_advisory_xact_lock(hashtext(${`plinth.knowledge-volume:${ownerId}`}))`.execute(kysely(tx))
}

export async function knowledgeBytesOf(db: Executor, ownerId: string): Promise<number> {
  // Items of a deleted project count no more: nobody can reach them (or delete them) again.
  const row = await kysely(db)
    .selectFrom('knowledge_items as i')
    .innerJoin('projects as p', 'p.id', 'i.project_id')
    .select((eb) => eb.fn.coalesce(eb.fn.sum<string>('i.byte_size'), sql<string>`0`).as('bytes'))
    .where('i.owner_id', '=', ownerId)
    .where('i.deleted_at', 'is', null)
    .where('p.deleted_at', 'is', null)
    .executeTakeFirstOrThrow()
  return Number(row.bytes)
}

/** Marks an item failed with a reason a person can read. */
export async function failKnowledgeIngest(
  tx: Executor,
  itemId: string,
  reason: string,
): Promise<KnowledgeItem | undefined> {
  const row = await kysely(tx)
    .updateTable('knowledge_items')
    .set({
      ingest_status: 'failed',
      ingest_error: reason.slice(0, 1000),
      upload: null,
      upload_path: null,
      ingest_lease_until: null,
      updated_at: new Date(),
    })
    .where('id', '=', itemId)
    .where('ingest_status', '=', 'pending')
    .where('deleted_at', 'is', null)
    .returning(itemColumns)
    .executeTakeFirst()
  if (!row) return undefined
  const item = toItem(row)
  await appendEvents(tx, [knowledgeEvent('knowledge.failed', item)])
  return item
}

export async function publishKnowledgeItem(tx: Executor, itemId: string): Promise<KnowledgeItem | undefined> {
  const row = await kysely(tx)
    .updateTable('knowledge_items')
    .set({ status: 'published', published_at: sql`coalesce(published_at, now())`, updated_at: new Date() })
    .where('id', '=', itemId)
    .where('deleted_at', 'is', null)
    .returning(itemColumns)
    .executeTakeFirst()
  if (!row) return undefined
  await kysely(tx).updateTable('knowledge_chunks').set({ published: true }).where('item_id', '=', itemId).execute()
  const item = toItem(row)
  await appendEvents(tx, [knowledgeEvent('knowledge.published', item)])
  return item
}

/** Soft-deletes an item (its row and text stay for history); its chunks go, so no search finds it. */
export async function deleteKnowledgeItem(tx: Executor, item: KnowledgeItem): Promise<void> {
  await kysely(tx)
    .updateTable('knowledge_items')
    .set({ deleted_at: new Date(), upload: null, upload_path: null, updated_at: new Date() })
    .where('id', '=', item.id)
    .execute()
  await kysely(tx).deleteFrom('knowledge_chunks').where('item_id', '=', item.id).execute()
  await appendEvents(tx, [knowledgeEvent('knowledge.deleted', item)])
}

/** An item's chunks in order (ids are made in order, so the id is the cursor). */
export async function listKnowledgeChunks(
  db: Executor,
  itemId: string,
  page: PageRequest,
): Promise<Page<KnowledgeChunk>> {
  let query = kysely(db)
    .selectFrom('knowledge_chunks')
    .select(['id', 'item_id', 'seq', 'heading', 'text'])
    .where('item_id', '=', itemId)
    .orderBy('id')
    .limit(page.limit + 1)
  if (page.after) query = query.where('id', '>', page.after)
  const rows = await query.execute()
  return toPage(
    rows.map((row) => ({ id: row.id, itemId: row.item_id, seq: row.seq, heading: row.heading, text: row.text })),
    page.limit,
  )
}

function scopeCondition(scope: ChunkScope) {
  const parts = []
  if (scope.own && scope.own.projectIds.length > 0)
    parts.push(sql`(c.owner_id = ${scope.own.ownerId} and c.project_id = any(${[...scope.own.projectIds]}::text[]))`)
  if (scope.shared && scope.shared.projectIds.length > 0) {
    parts.push(
      sql`(c.owner_id <> ${scope.shared.actorId} and c.published and c.project_id = any(${[...scope.shared.projectIds]}::text[]))`,
    )
  }
  // Until its item is ready a chunk is not found: an ingestion under way (or cut off by a crash, its
  // partial work to be replaced) shows nothing. An anti-join on the pending items' partial index: a
  // lookup of every candidate's item (to find it ready) made the search many times slower.
  return parts.length === 0
    ? null
    : sql`(${sql.join(parts, sql` or `)}) and not exists (select 1 from knowledge_items p where p.id = c.item_id and p.ingest_status = 'pending' and p.deleted_at is null)`
}

/**
 * Full-text path: chunks matching tsqueries (input syntax, built without the parser), tried in order
 * — e.g. all words, then any two, then any one — each stage adding what the earlier ones did not
 * find, ranked by ts_rank_cd within the stage. Each stage ranks at most `limit × 20` matches, so a
 * query of common words does not rank a large part of the corpus.
 */
export async function searchChunksFullText(
  db: Executor,
  scope: ChunkScope,
  stages: readonly string[],
  limit: number,
): Promise<ChunkHit[]> {
  const where = scopeCondition(scope)
  if (!where || stages.length === 0) return []
  const found: Array<{ id: string; score: number }> = []
  const seen = new Set<string>()
  for (const tsquery of stages) {
    // Ranking reads every match's vector; a pool caps that work for common words (the vector path
    // and the earlier, narrower stages carry the precision).
    const { rows } = await sql<{ id: string; score: number | string }>`
      select m.id, ts_rank_cd(m.search, ${tsquery}::tsquery) as score
      from (select c.id, c.search from knowledge_chunks c where c.search @@ ${tsquery}::tsquery and ${where} limit ${limit * 20}) as m
      order by score desc, m.id
      limit ${limit + seen.size}`.execute(kysely(db))
    for (const row of rows) {
      if (seen.has(row.id)) continue
      seen.add(row.id)
      found.push({ id: row.id, score: Number(row.score) })
      if (found.length >= limit) break
    }
    if (found.length >= limit) break
  }
  if (found.length === 0) return []
  const details = await chunkDetails(
    db,
    found.map((hit) => hit.id),
  )
  return found.flatMap((hit) => {
    const detail = details.get(hit.id)
    return detail ? [{ ...detail, score: hit.score }] : []
  })
}

async function chunkDetails(db: Executor, ids: readonly string[]): Promise<Map<string, Omit<ChunkHit, 'score'>>> {
  const { rows } = await sql<HitRow>`
    select c.id, c.item_id, c.project_id, c.owner_id, c.heading, c.text, c.seq, i.title, 0 as score
    from knowledge_chunks c join knowledge_items i on i.id = c.item_id
    where c.id = any(${[...ids]}::text[])`.execute(kysely(db))
  return new Map(rows.map((row) => [row.id, toHit(row)]))
}

/**
 * Vector path: the nearest chunks by cosine distance, through the HNSW index on the recorded
 * dimension (iterative scans keep filtered searches complete); `exact` skips the index (for recall).
 */
export async function searchChunksVector(
  db: Executor,
  scope: ChunkScope,
  embedding: readonly number[],
  dimensions: number,
  limit: number,
  exact = false,
): Promise<ChunkHit[]> {
  const where = scopeCondition(scope)
  if (!where) return []
  const dims = sql.raw(String(Math.trunc(dimensions)))
  const query = sql`${vectorLiteral(embedding)}::vector(${dims})`
  // The index is on `embedding::vector(N)`; an expression without the cast cannot use it.
  const distance = exact ? sql`(c.embedding <=> ${query})` : sql`(c.embedding::vector(${dims}) <=> ${query})`
  const { rows } = await sql<HitRow>`
    with nearest as materialized (
      select c.id, c.item_id, c.project_id, c.owner_id, c.heading, c.text, c.seq, ${distance} as distance
      from knowledge_chunks c
      where ${where}
      order by ${distance}
      limit ${limit}
    )
    select n.id, n.item_id, n.project_id, n.owner_id, n.heading, n.text, n.seq, i.title, 1 - n.distance as score
    from nearest n join knowledge_items i on i.id = n.item_id
    order by n.distance, n.id`.execute(kysely(db))
  return rows.map(toHit)
}

/** The embedder recorded for this database, if any. */
export async function getRagSettings(
  db: Executor,
): Promise<{ embedder: string; dimensions: number; tokenizer: number } | undefined> {
  return kysely(db)
    .selectFrom('rag_settings')
    .select(['embedder', 'dimensions', 'tokenizer'])
    .where('id', '=', 1)
    .executeTakeFirst()
}

/** Records the tokenizer revision the stored texts are indexed with. */
export async function setRagTokenizer(db: Executor, tokenizer: number): Promise<void> {
  await kysely(db).updateTable('rag_settings').set({ tokenizer, updated_at: new Date() }).where('id', '=', 1).execute()
}

/**
 * New search vectors (and, when given, embeddings) for knowledge chunks or memories tokenized again
 * (`src/rag/retokenize.ts`).
 */
export async function updateIndexing(
  tx: Executor,
  table: 'knowledge_chunks' | 'memories',
  updates: ReadonlyArray<{ id: string; text: string; search: string; embedding?: readonly number[] }>,
): Promise<void> {
  for (const update of updates)
    await kysely(tx)
      .updateTable(table)
      .set({
        search: sql`${update.search}::tsvector`,
        ...(update.embedding && { embedding: sql`${vectorLiteral(update.embedding)}::vector` }),
      })
      .where('id', '=', update.id)
      // A text changed since it was read (a memory edited meanwhile) was indexed by its own write.
      .where('text', '=', update.text)
      .execute()
}

export async function setRagSettings(db: Executor, embedder: string, dimensions: number): Promise<void> {
  await kysely(db)
    .insertInto('rag_settings')
    .values({ id: 1, embedder, dimensions })
    .onConflict((conflict) => conflict.column('id').doUpdateSet({ embedder, dimensions, updated_at: new Date() }))
    .execute()
}

/**
 * The HNSW index for one dimension (and no other: a changed dimension drops the old one).
 * `buildMemory` (e.g. `512MB`) is the build's maintenance_work_mem: a graph that does not fit
 * builds far more slowly.
 */
export async function ensureVectorIndex(db: Executor, dimensions: number, buildMemory?: string): Promise<void> {
  const dims = Math.trunc(dimensions)
  const name = `knowledge_chunks_embedding_${dims}`
  // m = 24 and ef_construction = 128 (pgvector's defaults are 16 and 64): with ef_search 400 the
  // bench's recall@10 at 100k chunks is 0.97 instead of 0.7, for twice the build time.
  const create = sql`create index if not exists ${sql.id(name)} on knowledge_chunks using hnsw ((embedding::vector(${sql.raw(String(dims))})) vector_cosine_ops) with (m = 24, ef_construction = 128)`
  await kysely(db)
    .transaction()
    .execute(async (tx) => {
      // Instances starting together each ensure the index: `if not exists` does not hold against a
      // concurrent create (a duplicate-key error), so one at a time; the others then find it.
      await sql`select pg_advisory_xact_lock(${vectorIndexLock})`.execute(tx)
      await dropVectorIndexes(executorOf(tx), name)
      if (buildMemory && /^\d+(kB|MB|GB)$/.test(buildMemory))
        await sql`select set_config('maintenance_work_mem', ${buildMemory}, true)`.execute(tx)
      await create.execute(tx)
    })
}

/** The advisory lock under which the HNSW index is dropped and built. */
const vectorIndexLock = 748202

/**
 * The HNSW index's size and the database's buffer pool, bytes: an index past the buffers is read from
 * disk by every insert and search (on the embedded database, several times slower).
 */
export async function vectorIndexFit(db: Executor): Promise<{ indexBytes: number; bufferBytes: number }> {
  const { rows } = await sql<{ index_bytes: string; buffer_bytes: string }>`
    select coalesce(sum(pg_relation_size(c.oid)), 0)::text as index_bytes,
      pg_size_bytes(current_setting('shared_buffers'))::text as buffer_bytes
    from pg_class c where c.relkind = 'i' and c.relname like 'knowledge\_chunks\_embedding\_%'`.execute(kysely(db))
  return { indexBytes: Number(rows[0]?.index_bytes ?? 0), bufferBytes: Number(rows[0]?.buffer_bytes ?? 0) }
}

/** Drops the HNSW indexes on knowledge chunks (all, or all but `keep`). */
export async function dropVectorIndexes(db: Executor, keep?: string): Promise<void> {
  const { rows } = await sql<{
    indexname: string
  }>`select indexname from pg_indexes where tablename = 'knowledge_chunks' and indexname like 'knowledge_chunks_embedding_%'`.execute(
    kysely(db),
  )
  for (const row of rows)
    if (row.indexname !== keep) await sql`drop index if exists ${sql.id(row.indexname)}`.execute(kysely(db))
}

/** Knowledge chunks and memories whose embedding is not of `dimensions` (a re-embed cut short leaves some). */
export async function countEmbeddingsNotOf(db: Executor, dimensions: number): Promise<number> {
  const { rows } = await sql<{ n: number | string }>`select
      (select count(*) from knowledge_chunks where vector_dims(embedding) <> ${dimensions}) +
      (select count(*) from memories where vector_dims(embedding) <> ${dimensions}) as n`.execute(kysely(db))
  return Number(rows[0]?.n ?? 0)
}

export async function countKnowledgeChunks(db: Executor): Promise<number> {
  const row = await kysely(db)
    .selectFrom('knowledge_chunks')
    .select(sql<string>`count(*)`.as('count'))
    .executeTakeFirst()
  return Number(row?.count ?? 0)
}

/**
 * Refreshes the planner's statistics of knowledge chunks once they have grown well past what it last
 * counted (`pg_class.reltuples`, by 20% and 500 rows): the embedded database runs no autovacuum, and a
 * planner that believes the table holds a few rows scans every chunk of a project instead of using the
 * full-text and vector indexes (a search took 180 ms a path at 40,000 chunks, 5 ms once analyzed).
 * True when it analyzed. Counting stops at the threshold, so a table that has not grown is not read whole.
 */
export async function analyzeChunksIfGrown(db: Executor): Promise<boolean> {
  const { rows } = await sql<{ reltuples: number | string }>`
    select reltuples::float8 as reltuples from pg_class where relname = 'knowledge_chunks' and relkind = 'r'`.execute(
    kysely(db),
  )
  const threshold = Math.ceil(Math.max(0, Number(rows[0]?.reltuples ?? 0)) * 1.2) + 500
  const { rows: counted } = await sql<{ n: string }>`
    select count(*)::text as n from (select 1 from knowledge_chunks limit ${threshold}) as s`.execute(kysely(db))
  if (Number(counted[0]?.n ?? 0) < threshold) return false
  await sql`analyze knowledge_chunks`.execute(kysely(db))
  return true
}

/** A page of chunks (id order) for re-embedding. */
export async function chunksAfter(
  db: Executor,
  afterId: string,
  limit: number,
): Promise<Array<{ id: string; heading: string; text: string }>> {
  return kysely(db)
    .selectFrom('knowledge_chunks')
    .select(['id', 'heading', 'text'])
    .where('id', '>', afterId)
    .orderBy('id')
    .limit(limit)
    .execute()
}

export async function updateChunkEmbeddings(
  tx: Executor,
  updates: ReadonlyArray<{ id: string; embedding: readonly number[] }>,
): Promise<void> {
  if (updates.length === 0) return
  const values = updates.map((update) => sql`(${update.id}, ${vectorLiteral(update.embedding)}::vector)`)
  await sql`update knowledge_chunks c set embedding = v.embedding from (values ${sql.join(values)}) as v (id, embedding) where c.id = v.id`.execute(
    kysely(tx),
  )
}

/** `[0.1,0.2,…]`: pgvector's text form. */
export function vectorLiteral(values: readonly number[]): string {
  return `[${values.join(',')}]`
}

/** A knowledge event on the project stream; its user is the item's owner. */
function knowledgeEvent(type: string, item: KnowledgeItem) {
  return {
    type,
    projectId: item.projectId,
    userId: item.ownerId,
    data: { item: item as unknown as { [key: string]: JsonValue } },
  }
}

interface ItemRow {
  id: string
  project_id: string
  owner_id: string
  title: string
  status: KnowledgeStatus
  ingest_status: IngestStatus
  ingest_error: string | null
  source: KnowledgeItem['source']
  filename: string | null
  media_type: string | null
  byte_size: number
  chunk_count: number
  created_at: Date
  updated_at: Date
  published_at: Date | null
}

function toItem(row: ItemRow): KnowledgeItem {
  return {
    id: row.id,
    projectId: row.project_id,
    ownerId: row.owner_id,
    title: row.title,
    status: row.status,
    ingestStatus: row.ingest_status,
    ingestError: row.ingest_error,
    source: row.source,
    filename: row.filename,
    mediaType: row.media_type,
    byteSize: row.byte_size,
    chunkCount: row.chunk_count,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
    publishedAt: row.published_at?.toISOString() ?? null,
  }
}

interface HitRow {
  id: string
  item_id: string
  project_id: string
  owner_id: string
  heading: string
  text: string
  seq: number
  title: string
  score: number | string
}

function toHit(row: HitRow): ChunkHit {
  return {
    chunkId: row.id,
    itemId: row.item_id,
    projectId: row.project_id,
    ownerId: row.owner_id,
    title: row.title,
    heading: row.heading,
    text: row.text,
    seq: row.seq,
    score: Number(row.score),
  }
}

/** Whether a project has any searchable knowledge (a run skips retrieval when it has none). */
/** `hasKnowledge` as a scalar subquery, to ride in a larger statement. */
export function hasKnowledgeRead(projectId: string): RawBuilder<boolean> {
  return sql<boolean>`exists (select 1 from knowledge_chunks where project_id = ${projectId})`
}

export async function hasKnowledge(db: Executor, projectId: string): Promise<boolean> {
  const row = await kysely(db)
    .selectFrom('knowledge_chunks')
    .select('id')
    .where('project_id', '=', projectId)
    .limit(1)
    .executeTakeFirst()
  return row !== undefined
}

/** The first `maxChars` characters of an item's extracted text (null before it is ready), and its whole length. */
export async function knowledgeItemText(
  db: Executor,
  itemId: string,
  maxChars: number,
): Promise<{ text: string; length: number } | null> {
  const row = await kysely(db)
    .selectFrom('knowledge_items')
    .select([
      sql<string | null>`substr(body, 1, ${maxChars})`.as('text'),
      sql<number | null>`char_length(body)`.as('length'),
    ])
    .where('id', '=', itemId)
    .where('ingest_status', '=', 'ready')
    .executeTakeFirst()
  return row && row.text !== null ? { text: row.text, length: Number(row.length) } : null
}
