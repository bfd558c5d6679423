import { sql, type RawBuilder } from 'kysely'
import { kysely, type Executor } from './executor.js'
import { vectorLiteral } from './knowledge-repository.js'
import { toPage, type Page, type PageRequest } from './page.js'
import type { JsonValue } from './json-column.js'
import { storableJson } from './storable.js'
import type { Store } from './open-store.js'

/** A remembered fact (docs/guides/memory.md): a user's own, or a project's. */
export interface Memory {
  id: string
  scope: 'user' | 'project'
  /** Who wrote it; for a user memory, whose it is. */
  ownerId: string
  projectId: string | null
  namespace: string
  key: string
  value: JsonValue | null
  /** What is searched and shown to the model. */
  text: string
  createdAt: string
  updatedAt: string
}

/** A memory to write, with what both search paths index. */
export interface MemoryWrite extends Omit<Memory, 'createdAt' | 'updatedAt'> {
  search: string
  embedding: readonly number[]
}

/** Which memories a read may see: the user's own, and those of some projects. */
export interface MemoryScope {
  userId?: string
  projectIds?: readonly string[]
  namespace?: string
}

const columns = sql.raw(
  'id, scope, owner_id, project_id, namespace, key, value, text, created_at, updated_at',
) as RawBuilder<unknown>

interface MemoryRow {
  id: string
  scope: string
  owner_id: string
  project_id: string | null
  namespace: string
  key: string
  value: unknown
  text: string
  created_at: Date | string
  updated_at: Date | string
}

/**
 * Writes a memory as `upsertMemory` does, unless it is a new one and its scope already holds `limit`
 * ('full'). A scope's writes take turns under a transaction-scoped advisory lock, so concurrent ones,
 * from any instance, cannot pass the limit together.
 */
export async function upsertMemoryWithinLimit(
  store: Store,
  write: MemoryWrite,
  limit: number,
): Promise<{ memory: Memory; created: boolean } | 'full'> {
  const owner =
    write.scope === 'project' && write.projectId
      ? { scope: 'project' as const, projectId: write.projectId }
      : { scope: 'user' as const, userId: write.ownerId }
  const lockKey = owner.scope === 'project' ? `memories:project:${owner.projectId}` : `memories:user:${owner.userId}`
  return store.transaction(async (tx) => {
    await sql`select pg_advisory_xact_lock(hashtextextended(${lockKey}, 0))`.execute(kysely(tx))
    const replaces = await findMemoryByKey(tx, owner, write.namespace, write.key)
    if (!replaces && (await countMemories(tx, owner)) >= limit) return 'full'
    return upsertMemory(tx, write)
  })
}

/**
 * Writes a memory; one with the same namespace and key in the same scope (the user's, or the
 * project's) is replaced — its id stays. `created` tells which happened.
 */
export async function upsertMemory(db: Executor, write: MemoryWrite): Promise<{ memory: Memory; created: boolean }> {
  const target =
    write.scope === 'user'
      ? sql`(owner_id, namespace, key) where scope = 'user'`
      : sql`(project_id, namespace, key) where scope = 'project'`
  const { rows } = await sql<MemoryRow & { created: boolean }>`
    insert into memories (id, scope, owner_id, project_id, namespace, key, value, text, search, embedding)
    values (${write.id}, ${write.scope}, ${write.ownerId}, ${write.projectId}, ${write.namespace}, ${write.key},
      ${storableJson(write.value)}::jsonb, ${write.text}, ${write.search}::tsvector, ${vectorLiteral(write.embedding)}::vector)
    on conflict ${target} do update set
      owner_id = excluded.owner_id, value = excluded.value, text = excluded.text, search = excluded.search,
      embedding = excluded.embedding, updated_at = now()
    returning ${columns}, (id = ${write.id}) as created`.execute(kysely(db))
  const row = rows[0]!
  return { memory: toMemory(row), created: row.created }
}

/** Changes a memory's value or text (with what search indexes); undefined when it is gone. */
export async function updateMemory(
  db: Executor,
  id: string,
  patch: { value?: JsonValue | null; text?: string; search?: string; embedding?: readonly number[] },
): Promise<Memory | undefined> {
  const sets = [sql`updated_at = now()`]
  if (patch.value !== undefined) sets.push(sql`value = ${storableJson(patch.value)}::jsonb`)
  if (patch.text !== undefined) sets.push(sql`text = ${patch.text}`)
  if (patch.search !== undefined) sets.push(sql`search = ${patch.search}::tsvector`)
  if (patch.embedding !== undefined) sets.push(sql`embedding = ${vectorLiteral(patch.embedding)}::vector`)
  const { rows } = await sql<MemoryRow>`
    update memories set ${sql.join(sets)} where id = ${id} returning ${columns}`.execute(kysely(db))
  return rows[0] && toMemory(rows[0])
}

export async function getMemory(db: Executor, id: string): Promise<Memory | undefined> {
  const { rows } = await sql<MemoryRow>`select ${columns} from memories where id = ${id}`.execute(kysely(db))
  return rows[0] && toMemory(rows[0])
}

/** The memory with this namespace and key in a scope. */
export async function findMemoryByKey(
  db: Executor,
  owner: { scope: 'user'; userId: string } | { scope: 'project'; projectId: string },
  namespace: string,
  key: string,
): Promise<Memory | undefined> {
  const where =
    owner.scope === 'user'
      ? sql`scope = 'user' and owner_id = ${owner.userId}`
      : sql`scope = 'project' and project_id = ${owner.projectId}`
  const { rows } = await sql<MemoryRow>`
    select ${columns} from memories where ${where} and namespace = ${namespace} and key = ${key}`.execute(kysely(db))
  return rows[0] && toMemory(rows[0])
}

/** Deletes a memory: no search finds it after this. */
export async function deleteMemory(db: Executor, id: string): Promise<boolean> {
  const { rows } = await sql<{ id: string }>`delete from memories where id = ${id} returning id`.execute(kysely(db))
  return rows.length > 0
}

/** How many memories a scope holds (its limit is checked before a new one is written). */
export async function countMemories(
  db: Executor,
  owner: { scope: 'user'; userId: string } | { scope: 'project'; projectId: string },
): Promise<number> {
  const where =
    owner.scope === 'user'
      ? sql`scope = 'user' and owner_id = ${owner.userId}`
      : sql`scope = 'project' and project_id = ${owner.projectId}`
  const { rows } = await sql<{ n: number | string }>`select count(*) as n from memories where ${where}`.execute(
    kysely(db),
  )
  return Number(rows[0]?.n ?? 0)
}

/** A page of the memories a scope sees, newest first. */
export async function listMemories(db: Executor, scope: MemoryScope, page: PageRequest): Promise<Page<Memory>> {
  const where = scopeCondition(scope)
  if (!where) return { items: [], nextCursor: null }
  const after = page.after ? sql`and id < ${page.after}` : sql``
  const { rows } = await sql<MemoryRow>`
    select ${columns} from memories where ${where} ${after}
    order by id desc limit ${page.limit + 1}`.execute(kysely(db))
  return toPage(rows.map(toMemory), page.limit)
}

/** Full-text path: memories matching the first stage that finds any, best first. */
export async function searchMemoriesFullText(
  db: Executor,
  scope: MemoryScope,
  stages: readonly string[],
  limit: number,
): Promise<Array<Memory & { score: number }>> {
  const where = scopeCondition(scope)
  if (!where) return []
  const found: Array<Memory & { score: number }> = []
  const seen = new Set<string>()
  for (const tsquery of stages) {
    const { rows } = await sql<MemoryRow & { score: number | string }>`
      select ${columns}, ts_rank_cd(search, ${tsquery}::tsquery) as score
      from memories where search @@ ${tsquery}::tsquery and ${where}
      order by score desc, id limit ${limit}`.execute(kysely(db))
    for (const row of rows) {
      if (seen.has(row.id)) continue
      seen.add(row.id)
      found.push({ ...toMemory(row), score: Number(row.score) })
    }
    if (found.length >= limit) break
  }
  return found.slice(0, limit)
}

/**
 * Vector path: the nearest memories by cosine distance (exact: a user's or project's memories are
 * few). Embeddings of another dimension (made before the embedder changed) are left out.
 */
export async function searchMemoriesVector(
  db: Executor,
  scope: MemoryScope,
  embedding: readonly number[],
  dimensions: number,
  limit: number,
): Promise<Array<Memory & { score: number }>> {
  const where = scopeCondition(scope)
  if (!where) return []
  const dims = Math.trunc(dimensions)
  const query = sql`${vectorLiteral(embedding)}::vector(${sql.raw(String(dims))})`
  const { rows } = await sql<MemoryRow & { distance: number | string }>`
    select ${columns}, (embedding::vector(${sql.raw(String(dims))}) <=> ${query}) as distance
    from (select * from memories where ${where} and vector_dims(embedding) = ${dims}) as m
    order by distance, id limit ${limit}`.execute(kysely(db))
  return rows.map((row) => ({ ...toMemory(row), score: 1 - Number(row.distance) }))
}

/** Whether a user has any memory, or a project does (a run skips recall's searches otherwise). */
export function hasMemoriesRead(userId: string, projectId: string): RawBuilder<boolean> {
  return sql<boolean>`exists (select 1 from memories where (scope = 'user' and owner_id = ${userId})
    or (scope = 'project' and project_id = ${projectId}))`
}

export async function hasMemories(db: Executor, userId: string, projectId: string): Promise<boolean> {
  const { rows } = await sql<{ found: boolean }>`select ${hasMemoriesRead(userId, projectId)} as found`.execute(
    kysely(db),
  )
  return rows[0]?.found === true
}

function scopeCondition(scope: MemoryScope): RawBuilder<unknown> | undefined {
  const parts: RawBuilder<unknown>[] = []
  if (scope.userId) parts.push(sql`(scope = 'user' and owner_id = ${scope.userId})`)
  if (scope.projectIds && scope.projectIds.length > 0)
    parts.push(sql`(scope = 'project' and project_id = any(${[...scope.projectIds]}::text[]))`)
  if (parts.length === 0) return undefined
  const either = sql`(${sql.join(parts, sql` or `)})`
  return scope.namespace === undefined ? either : sql`${either} and namespace = ${scope.namespace}`
}

function toMemory(row: MemoryRow): Memory {
  return {
    id: row.id,
    scope: row.scope === 'project' ? 'project' : 'user',
    ownerId: row.owner_id,
    projectId: row.project_id,
    namespace: row.namespace,
    key: row.key,
    value: (row.value ?? null) as JsonValue | null,
    text: row.text,
    createdAt: new Date(row.created_at).toISOString(),
    updatedAt: new Date(row.updated_at).toISOString(),
  }
}

/** How many memories there are, of every scope (whether an embedder change leaves vectors behind). */
export async function countAllMemories(db: Executor): Promise<number> {
  const { rows } = await sql<{ n: number | string }>`select count(*) as n from memories`.execute(kysely(db))
  return Number(rows[0]?.n ?? 0)
}

/** New embeddings of memories (a re-embed with another embedder). */
export async function updateMemoryEmbeddings(
  tx: Executor,
  updates: ReadonlyArray<{ id: string; embedding: readonly number[] }>,
): Promise<void> {
  if (updates.length === 0) return
  const values = updates.map((update) => sql`(${update.id}, ${vectorLiteral(update.embedding)}::vector)`)
  await sql`update memories m set embedding = v.embedding from (values ${sql.join(values)}) as v (id, embedding) where m.id = v.id`.execute(
    kysely(tx),
  )
}

/** Memories in id order after `afterId` (their text), for indexing them again. */
export async function memoriesAfter(
  db: Executor,
  afterId: string,
  limit: number,
): Promise<Array<{ id: string; text: string }>> {
  return kysely(db)
    .selectFrom('memories')
    .select(['id', 'text'])
    .where('id', '>', afterId)
    .orderBy('id')
    .limit(limit)
    .execute()
}
