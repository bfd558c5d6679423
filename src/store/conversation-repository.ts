import { sql, type RawBuilder } from 'kysely'
import { announceAccessChange } from './access-signals.js'
import { toProject, type Project } from './project-repository.js'
import type { PermissionMode } from './database.js'
import { appendEvents } from './event-log.js'
import { newId } from './ids.js'
import { toPage, type Page, type PageRequest } from './page.js'
import { kysely, type Executor } from './executor.js'

export interface Conversation {
  id: string
  projectId: string
  ownerId: string
  title: string
  permissionMode: PermissionMode
  /** When a `full` permission mode reverts to `manual`. */
  modeExpiresAt: string | null
  createdAt: string
  updatedAt: string
}

export interface ConversationPatch {
  title?: string
  permissionMode?: PermissionMode
}

export async function createConversation(
  tx: Executor,
  input: { projectId: string; ownerId: string; title?: string },
): Promise<Conversation> {
  const row = await kysely(tx)
    .insertInto('conversations')
    .values({ id: newId(), project_id: input.projectId, owner_id: input.ownerId, title: input.title ?? '' })
    .returningAll()
    .executeTakeFirstOrThrow()
  const conversation = toConversation(row)
  await appendEvents(tx, [
    {
      type: 'conversation.created',
      projectId: conversation.projectId,
      conversationId: conversation.id,
      userId: conversation.ownerId,
      data: { conversation },
    },
  ])
  return conversation
}

/** In a read that rides with `getConversationWithProject`: the conversation's project id. */
export const conversationProjectId: RawBuilder<unknown> = sql.ref('conversations.project_id')

/**
 * A live conversation and its live project, in one query; callers check access. `reads`: subqueries
 * read in the same statement (they may name `conversationProjectId`), their values under their names.
 */
export async function getConversationWithProject(
  db: Executor,
  id: string,
  reads: { [name: string]: RawBuilder<unknown> } = {},
): Promise<{ conversation: Conversation; project: Project; reads: { [name: string]: unknown } } | undefined> {
  const names = Object.keys(reads)
  const row = await kysely(db)
    .selectFrom('conversations')
    .innerJoin('projects', 'projects.id', 'conversations.project_id')
    .selectAll('conversations')
    .select(sql<Parameters<typeof toProject>[0]>`to_jsonb(projects.*)`.as('project'))
    .$if(names.length > 0, (query) =>
      query.select(
        sql<{ [name: string]: unknown }>`json_build_object(${sql.join(
          names.flatMap((name) => [sql.lit(name), sql`(${reads[name]!})`]),
        )})`.as('reads'),
      ),
    )
    .where('conversations.id', '=', id)
    .where('conversations.deleted_at', 'is', null)
    .where('projects.deleted_at', 'is', null)
    .executeTakeFirst()
  if (!row) return undefined
  const read = (row as { reads?: { [name: string]: unknown } }).reads ?? {}
  return { conversation: toConversation(row), project: toProject(row.project), reads: read }
}

/**
 * The same pair as a subquery another statement carries (a run's turn end reads it for the call it
 * dispatches next): null when either is gone. `conversationWithProject` maps what it read.
 */
export function conversationWithProjectRead(id: string): RawBuilder<unknown> {
  return sql`select json_build_array(to_jsonb(c.*), to_jsonb(p.*)) from conversations c
    join projects p on p.id = c.project_id
    where c.id = ${id} and c.deleted_at is null and p.deleted_at is null`
}

/** What `conversationWithProjectRead` read. */
export function conversationWithProject(read: unknown): { conversation: Conversation; project: Project } | undefined {
  if (!Array.isArray(read) || read.length !== 2) return undefined
  const [conversation, project] = read as [Parameters<typeof toConversation>[0], Parameters<typeof toProject>[0]]
  return { conversation: toConversation(conversation), project: toProject(project) }
}

export async function getConversation(db: Executor, id: string): Promise<Conversation | undefined> {
  const row = await kysely(db)
    .selectFrom('conversations')
    .innerJoin('projects', 'projects.id', 'conversations.project_id')
    .selectAll('conversations')
    .where('conversations.id', '=', id)
    .where('conversations.deleted_at', 'is', null)
    .where('projects.deleted_at', 'is', null)
    .executeTakeFirst()
  return row && toConversation(row)
}

/** Live conversations of a project, newest first; `ownerId` narrows to one user's. */
export async function listConversations(
  db: Executor,
  projectId: string,
  page: PageRequest,
  ownerId?: string,
): Promise<Page<Conversation>> {
  let query = kysely(db)
    .selectFrom('conversations')
    .selectAll()
    .where('project_id', '=', projectId)
    .where('deleted_at', 'is', null)
    .orderBy('id', 'desc')
    .limit(page.limit + 1)
  if (ownerId) query = query.where('owner_id', '=', ownerId)
  if (page.after) query = query.where('id', '<', page.after)
  return toPage((await query.execute()).map(toConversation), page.limit)
}

/** A user's live conversations in some projects (live ones), newest first. */
export async function listConversationsOf(
  db: Executor,
  ownerId: string,
  projectIds: readonly string[],
  page: PageRequest,
): Promise<Page<Conversation>> {
  if (projectIds.length === 0) return { items: [], nextCursor: null }
  let query = kysely(db)
    .selectFrom('conversations')
    .innerJoin('projects', 'projects.id', 'conversations.project_id')
    .selectAll('conversations')
    .where('conversations.owner_id', '=', ownerId)
    .where('conversations.project_id', 'in', [...projectIds])
    .where('conversations.deleted_at', 'is', null)
    .where('projects.deleted_at', 'is', null)
    .orderBy('conversations.id', 'desc')
    .limit(page.limit + 1)
  if (page.after) query = query.where('conversations.id', '<', page.after)
  return toPage((await query.execute()).map(toConversation), page.limit)
}

export async function updateConversation(
  tx: Executor,
  conversation: Conversation,
  patch: ConversationPatch,
  options: { fullModeTtlMs: number },
): Promise<Conversation> {
  const modeChange =
    patch.permissionMode === undefined
      ? {}
      : {
          permission_mode: patch.permissionMode,
          mode_expires_at: patch.permissionMode === 'full' ? new Date(Date.now() + options.fullModeTtlMs) : null,
        }
  const row = await kysely(tx)
    .updateTable('conversations')
    .set({ ...(patch.title !== undefined && { title: patch.title }), ...modeChange, updated_at: new Date() })
    .where('id', '=', conversation.id)
    .returningAll()
    .executeTakeFirstOrThrow()
  const updated = toConversation(row)
  await appendEvents(tx, [
    {
      type: 'conversation.updated',
      projectId: updated.projectId,
      conversationId: updated.id,
      userId: updated.ownerId,
      data: { conversation: updated },
    },
  ])
  return updated
}

export async function deleteConversation(tx: Executor, conversation: Conversation): Promise<void> {
  const now = new Date()
  await kysely(tx)
    .updateTable('conversations')
    .set({ deleted_at: now, updated_at: now })
    .where('id', '=', conversation.id)
    .execute()
  // Its runs stay (usage counts them) but are no longer listed (`listRuns`' `openConversations`).
  await kysely(tx)
    .updateTable('runs')
    .set({ conversation_deleted: true })
    .where('conversation_id', '=', conversation.id)
    .execute()
  await appendEvents(tx, [
    {
      type: 'conversation.deleted',
      projectId: conversation.projectId,
      conversationId: conversation.id,
      userId: conversation.ownerId,
      data: { conversationId: conversation.id },
    },
  ])
  await announceAccessChange(tx, [`project:${conversation.projectId}`])
}

function toConversation(row: {
  id: string
  project_id: string
  owner_id: string
  title: string
  permission_mode: PermissionMode
  // Dates from a row; ISO strings from `to_jsonb`.
  mode_expires_at: Date | string | null
  created_at: Date | string
  updated_at: Date | string
}): Conversation {
  const expiresAt = row.mode_expires_at === null ? null : new Date(row.mode_expires_at)
  // An expired `full` mode reads as `manual` even before anything rewrites the row.
  const expired = row.permission_mode === 'full' && expiresAt !== null && expiresAt.getTime() <= Date.now()
  return {
    id: row.id,
    projectId: row.project_id,
    ownerId: row.owner_id,
    title: row.title,
    permissionMode: expired ? 'manual' : row.permission_mode,
    modeExpiresAt: expired ? null : (expiresAt?.toISOString() ?? null),
    createdAt: new Date(row.created_at).toISOString(),
    updatedAt: new Date(row.updated_at).toISOString(),
  }
}
