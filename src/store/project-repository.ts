import { announceAccessChange } from './access-signals.js'
import { appendEvents } from './event-log.js'
import { newId } from './ids.js'
import { toPage, type Page, type PageRequest } from './page.js'
import { storableJson } from './storable.js'
import { kysely, type Executor } from './executor.js'
import { projectBudget, storableBudget, type ProjectBudget } from './budget-repository.js'
import { projectRetention, type RetentionDays } from './retention-repository.js'
import { projectQuota, type ProjectQuota } from './run-quota-repository.js'

/** Model parameters a project (or a run) sets; unset ones come from the model's configuration. */
export interface ModelParams {
  temperature?: number
  maxTokens?: number
  topP?: number
  stop?: string[]
}

/** The agent profile of a project: what its runs are started with. */
export interface AgentProfile {
  /** Added to the system prompt of every run in the project. */
  systemPrompt: string | null
  /** The model runs use when they name none (must be configured). */
  defaultModel: string | null
  modelParams: ModelParams
  /** Command ids its agents may call; null: every exposed tool. */
  tools: string[] | null
  /** Automatic knowledge injection also uses items members other than the owner published. */
  injectMemberKnowledge: boolean
  /** Runs recall the user's and the project's memories into the prompt (a run may turn it off or on). */
  memoryRecall: boolean
}

export interface Project extends AgentProfile {
  id: string
  ownerId: string
  name: string
  description: string
  /** Names of operator-declared runtime directories mounted read-only into the project's sandbox. */
  runtimes: string[]
  /** What its model calls may spend per day and month, and its runs' default run budget (null: none). */
  budget: ProjectBudget | null
  /** Its own retention periods, in days; the shorter of these and the server's applies (null: the server's). */
  retention: RetentionDays | null
  /** Its own run quota, set by the operator (null: the server's). */
  quota: ProjectQuota | null
  createdAt: string
  updatedAt: string
}

export interface ProjectInput extends Partial<AgentProfile> {
  name: string
  description?: string
  runtimes?: string[]
  budget?: ProjectBudget | null
  retention?: RetentionDays | null
}

/** Creates a project and its `project.created` event in the caller's transaction. */
export async function createProject(tx: Executor, ownerId: string, input: ProjectInput): Promise<Project> {
  const row = await kysely(tx)
    .insertInto('projects')
    .values({
      id: newId(),
      owner_id: ownerId,
      name: input.name,
      description: input.description ?? '',
      ...(input.runtimes !== undefined && { runtimes: storableJson(input.runtimes) }),
      ...(input.budget && { budget: storableBudget(input.budget) }),
      ...(input.retention && { retention: storableRetention(input.retention) }),
      system_prompt: input.systemPrompt ?? null,
      default_model: input.defaultModel ?? null,
      model_params: storableJson(input.modelParams ?? {}),
      tools: input.tools ? storableJson(input.tools) : null,
      inject_member_knowledge: input.injectMemberKnowledge ?? false,
      memory_recall: input.memoryRecall ?? true,
    })
    .returningAll()
    .executeTakeFirstOrThrow()
  const project = toProject(row)
  await appendEvents(tx, [{ type: 'project.created', projectId: project.id, userId: ownerId, data: { project } }])
  // Every instance's cached project listings go (see ProjectListCache).
  await announceAccessChange(tx, [`project:${project.id}`])
  return project
}

/** A live (not deleted) project by id, whoever owns it; callers check access. */
export async function getProject(db: Executor, id: string): Promise<Project | undefined> {
  const row = await kysely(db)
    .selectFrom('projects')
    .selectAll()
    .where('id', '=', id)
    .where('deleted_at', 'is', null)
    .executeTakeFirst()
  return row && toProject(row)
}

/** The ids of the live projects `ownerId` owns. */
export async function liveProjectIdsOwnedBy(db: Executor, ownerId: string): Promise<string[]> {
  const owned = await kysely(db)
    .selectFrom('projects')
    .select('id')
    .where('owner_id', '=', ownerId)
    .where('deleted_at', 'is', null)
    .execute()
  return owned.map((row) => row.id)
}

/** The ids of every project `ownerId` owns, deleted ones included. */
export async function projectIdsOwnedBy(db: Executor, ownerId: string): Promise<string[]> {
  return (await kysely(db).selectFrom('projects').select('id').where('owner_id', '=', ownerId).execute()).map(
    (row) => row.id,
  )
}

/** Live projects owned by `ownerId` plus those in `sharedIds`, newest first. */
export async function listProjects(
  db: Executor,
  ownerId: string,
  page: PageRequest,
  sharedIds: readonly string[] = [],
): Promise<Page<Project>> {
  let query = kysely(db)
    .selectFrom('projects')
    .selectAll()
    .where('deleted_at', 'is', null)
    .where((eb) =>
      sharedIds.length > 0
        ? eb.or([eb('owner_id', '=', ownerId), eb('id', 'in', sharedIds)])
        : eb('owner_id', '=', ownerId),
    )
    .orderBy('id', 'desc')
    .limit(page.limit + 1)
  if (page.after) query = query.where('id', '<', page.after)
  return toPage((await query.execute()).map(toProject), page.limit)
}

export async function updateProject(tx: Executor, project: Project, patch: Partial<ProjectInput>): Promise<Project> {
  const row = await kysely(tx)
    .updateTable('projects')
    .set({
      ...(patch.name !== undefined && { name: patch.name }),
      ...(patch.description !== undefined && { description: patch.description }),
      ...(patch.runtimes !== undefined && { runtimes: storableJson(patch.runtimes) }),
      ...(patch.budget !== undefined && { budget: storableBudget(patch.budget) }),
      ...(patch.retention !== undefined && { retention: storableRetention(patch.retention) }),
      ...(patch.systemPrompt !== undefined && { system_prompt: patch.systemPrompt }),
      ...(patch.defaultModel !== undefined && { default_model: patch.defaultModel }),
      ...(patch.modelParams !== undefined && { model_params: storableJson(patch.modelParams) }),
      ...(patch.tools !== undefined && { tools: patch.tools === null ? null : storableJson(patch.tools) }),
      ...(patch.injectMemberKnowledge !== undefined && { inject_member_knowledge: patch.injectMemberKnowledge }),
      ...(patch.memoryRecall !== undefined && { memory_recall: patch.memoryRecall }),
      updated_at: new Date(),
    })
    .where('id', '=', project.id)
    .returningAll()
    .executeTakeFirstOrThrow()
  const updated = toProject(row)
  await appendEvents(tx, [
    { type: 'project.updated', projectId: project.id, userId: project.ownerId, data: { project: updated } },
  ])
  await announceAccessChange(tx, [`project:${project.id}`])
  return updated
}

/** Soft-deletes a project and its conversations; history stays for audit. */
export async function deleteProject(tx: Executor, project: Project): Promise<void> {
  const now = new Date()
  await kysely(tx)
    .updateTable('projects')
    .set({ deleted_at: now, updated_at: now })
    .where('id', '=', project.id)
    .execute()
  await kysely(tx)
    .updateTable('conversations')
    .set({ deleted_at: now })
    .where('project_id', '=', project.id)
    .where('deleted_at', 'is', null)
    .execute()
  await kysely(tx)
    .updateTable('runs')
    .set({ conversation_deleted: true })
    .where('project_id', '=', project.id)
    .where('conversation_deleted', '=', false)
    .execute()
  // Its knowledge goes with it: out of every owner's volume, the stored uploads dropped now; the rows
  // and chunks (unreachable: nobody searches a deleted project) go with retention.
  await kysely(tx)
    .updateTable('knowledge_items')
    .set({ deleted_at: now, upload: null, upload_path: null, updated_at: now })
    .where('project_id', '=', project.id)
    .where('deleted_at', 'is', null)
    .execute()
  await appendEvents(tx, [
    { type: 'project.deleted', projectId: project.id, userId: project.ownerId, data: { projectId: project.id } },
  ])
  await announceAccessChange(tx, [`project:${project.id}`])
}

/** A `projects` row (as selected, or as `to_jsonb` of it with dates as text) as a Project. */
export function toProject(row: {
  id: string
  owner_id: string
  name: string
  description: string
  runtimes: unknown
  system_prompt: string | null
  default_model: string | null
  model_params: unknown
  tools: unknown
  inject_member_knowledge?: boolean
  memory_recall?: boolean
  budget?: unknown
  retention?: unknown
  quota?: unknown
  created_at: Date | string
  updated_at: Date | string
}): Project {
  return {
    id: row.id,
    ownerId: row.owner_id,
    name: row.name,
    description: row.description,
    runtimes: Array.isArray(row.runtimes)
      ? row.runtimes.filter((name): name is string => typeof name === 'string')
      : [],
    systemPrompt: row.system_prompt,
    defaultModel: row.default_model,
    modelParams: (row.model_params && typeof row.model_params === 'object' ? row.model_params : {}) as ModelParams,
    tools: Array.isArray(row.tools) ? row.tools.filter((name): name is string => typeof name === 'string') : null,
    injectMemberKnowledge: row.inject_member_knowledge === true,
    memoryRecall: row.memory_recall !== false,
    budget: projectBudget(row.budget ?? null),
    retention: projectRetention(row.retention ?? null),
    quota: projectQuota(row.quota ?? null),
    createdAt: new Date(row.created_at).toISOString(),
    updatedAt: new Date(row.updated_at).toISOString(),
  }
}

function storableRetention(retention: RetentionDays | null): ReturnType<typeof storableJson> | null {
  const kept = projectRetention(retention)
  return kept ? storableJson(kept) : null
}
