import { getConversation, getProject, type Conversation, type Project, type Store, type User } from '../store/index.js'
import { notFound } from './problem.js'

/**
 * Resolves resources for a caller. Whatever the caller may not see answers 404, exactly like a
 * resource that does not exist, so ids cannot be probed.
 */
export async function projectForCaller(store: Store, user: User, projectId: string): Promise<Project> {
  const project = await getProject(store.db, projectId)
  if (!project || project.ownerId !== user.id) throw notFound('project')
  return project
}

export async function conversationForCaller(store: Store, user: User, conversationId: string): Promise<Conversation> {
  const conversation = await getConversation(store.db, conversationId)
  if (!conversation || conversation.ownerId !== user.id) throw notFound('conversation')
  return conversation
}

/** A project as the API shows it to `user`. */
export function projectView(project: Project, user: User): Project & { shared: boolean } {
  return { ...project, shared: project.ownerId !== user.id }
}
