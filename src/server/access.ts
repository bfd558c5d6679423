import type { ProjectAction } from '../extension/index.js'
import { activeRunIds, type Conversation, type Project, type User } from '../store/index.js'
import { HttpProblem, notFound } from './problem.js'
import type { ServerDeps } from './server-deps.js'

/**
 * Resolves resources for a caller. Whatever the caller may not see answers 404, exactly like a
 * resource that does not exist, so ids cannot be probed. Sharing comes from the ProjectAuthz adapter.
 */
export async function projectForCaller(deps: ServerDeps, user: User, projectId: string, action: ProjectAction = 'read'): Promise<Project> {
  const project = await deps.access.project(user.id, projectId, 'read')
  if (!project) throw notFound('project')
  if (action !== 'read' && project.ownerId !== user.id && !(await deps.access.project(user.id, projectId, action))) {
    throw new HttpProblem('forbidden', `not allowed to ${action.replace('_', ' ')} in this project`)
  }
  return project
}

/** Only the owner may delete a project or manage it as a whole. */
export async function ownedProjectForCaller(deps: ServerDeps, user: User, projectId: string): Promise<Project> {
  const project = await projectForCaller(deps, user, projectId)
  if (project.ownerId !== user.id) throw new HttpProblem('forbidden', 'only the project owner may do this')
  return project
}

export async function conversationForCaller(deps: ServerDeps, user: User, conversationId: string): Promise<Conversation> {
  const conversation = await deps.access.conversation(user.id, conversationId)
  if (!conversation) throw notFound('conversation')
  return conversation
}

/** What a stream needs to re-check that its reader may still see a conversation. */
export interface ConversationStreamAccess {
  projectId: string
  shared: boolean
  recheck: () => Promise<boolean>
}

/** A conversation the caller may act in (404 otherwise), with how a stream of it re-checks access. */
export async function conversationForStream(
  deps: ServerDeps,
  user: User,
  conversationId: string,
): Promise<{ conversation: Conversation; project: Project; access: ConversationStreamAccess }> {
  const found = await deps.access.conversationInProject(user.id, conversationId)
  if (!found) throw notFound('conversation')
  const { conversation, project } = found
  return {
    conversation,
    project,
    access: {
      projectId: project.id,
      shared: project.ownerId !== user.id,
      recheck: async () => (await deps.access.conversation(user.id, conversation.id)) !== undefined,
    },
  }
}

/** A project as the API shows it to `user`. */
export function projectView(project: Project, user: User): Project & { shared: boolean } {
  return { ...project, shared: project.ownerId !== user.id }
}

/** Conversations as the API shows them: with the id of their active run. */
export async function withActiveRuns(deps: ServerDeps, conversations: readonly Conversation[]): Promise<Array<Conversation & { activeRunId: string | null }>> {
  const active = await activeRunIds(deps.store.db, conversations.map((conversation) => conversation.id))
  return conversations.map((conversation) => ({ ...conversation, activeRunId: active.get(conversation.id) ?? null }))
}

/** Live projects the user owns, and those shared with them (through the ProjectAuthz adapter). */
export async function visibleProjectIds(deps: ServerDeps, userId: string): Promise<string[]> {
  const owned = await deps.store.db.selectFrom('projects').select('id').where('owner_id', '=', userId).where('deleted_at', 'is', null).execute()
  const shared = await deps.access.sharedProjectIds(userId)
  return [...new Set([...owned.map((row) => row.id), ...shared])]
}
