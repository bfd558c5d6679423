import type { Conversation, Project, User } from '../store/index.js'
import type { ServerDeps } from './server-deps.js'

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
  const { conversation, project } = await deps.conversations.resolveWithProject(user, conversationId)
  return {
    conversation,
    project,
    access: {
      projectId: project.id,
      shared: project.ownerId !== user.id,
      recheck: () => deps.conversations.stillVisible(user.id, conversation.id),
    },
  }
}

/** A project as the API shows it to `user`. */
export function projectView(project: Project, user: User): Project & { shared: boolean } {
  return { ...project, shared: project.ownerId !== user.id }
}
