import { sql } from 'kysely'
import { kysely, type Executor } from './executor.js'

/** A conversation's work directory as last measured. */
export interface WorkUsage {
  bytes: number
  files: number
}

/** Records a conversation's measured usage (replacing what was recorded). */
export async function recordWorkUsage(
  db: Executor,
  conversationId: string,
  ownerId: string,
  usage: WorkUsage,
): Promise<void> {
  await kysely(db)
    .insertInto('work_usage')
    .values({ conversation_id: conversationId, owner_id: ownerId, bytes: usage.bytes, files: usage.files })
    .onConflict((conflict) =>
      conflict
        .column('conversation_id')
        .doUpdateSet({ bytes: usage.bytes, files: usage.files, measured_at: new Date() }),
    )
    .execute()
}

/** Adds a change the server made itself (a write or a delete) to the recorded usage. */
export async function adjustWorkUsage(
  db: Executor,
  conversationId: string,
  ownerId: string,
  change: WorkUsage,
): Promise<void> {
  await kysely(db)
    .insertInto('work_usage')
    .values({
      conversation_id: conversationId,
      owner_id: ownerId,
      bytes: Math.max(0, change.bytes),
      files: Math.max(0, change.files),
    })
    .onConflict((conflict) =>
      conflict.column('conversation_id').doUpdateSet({
        bytes: sql`greatest(0, work_usage.bytes + ${change.bytes})`,
        files: sql`greatest(0, work_usage.files + ${change.files})`,
      }),
    )
    .execute()
}

/** The recorded usage of one conversation and of all its owner's conversations. */
export async function workUsageOf(
  db: Executor,
  conversationId: string,
  ownerId: string,
): Promise<{ conversation: WorkUsage; user: WorkUsage }> {
  const row = await kysely(db)
    .selectFrom('work_usage')
    .select([
      sql<string>`coalesce(sum(bytes) filter (where conversation_id = ${conversationId}), 0)`.as('conversation_bytes'),
      sql<string>`coalesce(sum(files) filter (where conversation_id = ${conversationId}), 0)`.as('conversation_files'),
      sql<string>`coalesce(sum(bytes), 0)`.as('user_bytes'),
      sql<string>`coalesce(sum(files), 0)`.as('user_files'),
    ])
    .where('owner_id', '=', ownerId)
    .executeTakeFirstOrThrow()
  return {
    conversation: { bytes: Number(row.conversation_bytes), files: Number(row.conversation_files) },
    user: { bytes: Number(row.user_bytes), files: Number(row.user_files) },
  }
}

/** The recorded bytes of the work directories of every conversation in the project of `conversationId`. */
export async function projectWorkBytes(db: Executor, conversationId: string): Promise<number> {
  const { rows } = await sql<{ bytes: string }>`
    select coalesce(sum(u.bytes), 0) as bytes from work_usage u
    join conversations c on c.id = u.conversation_id
    where c.project_id = (select project_id from conversations where id = ${conversationId})`.execute(kysely(db))
  return Number(rows[0]?.bytes ?? 0)
}

/**
 * Holds, until the transaction ends, the right to add to the work usage of `ownerId` and of the project
 * of `conversationId` (owner first, then project, always in that order): two writes checked against a
 * quota at once would each see room for itself, on one instance or several.
 */
export async function lockWorkUsage(tx: Executor, conversationId: string, ownerId: string): Promise<void> {
  await sql`select pg_advisory_xact_lock(hashtext(${`plinth.work-usage:${ownerId}`}))`.execute(kysely(tx))
  await sql`select pg_advisory_xact_lock(hashtext('plinth.work-usage-project:' || project_id))
            from conversations where id = ${conversationId}`.execute(kysely(tx))
}
