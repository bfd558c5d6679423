import type { Conversation, Project, TransitionRead, User } from '../store/index.js'
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
  reads: { [name: string]: TransitionRead } = {},
): Promise<{
  conversation: Conversation
  project: Project
  access: ConversationStreamAccess
  reads: { [name: string]: unknown }
}> {
  const {
    conversation,
    project,
    reads: read,
  } = await deps.conversations.resolveWithProject(user, conversationId, reads)
  return {
    conversation,
    project,
    reads: read,
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
