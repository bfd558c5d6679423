import type { ProjectAction, ProjectAuthzAdapter } from '../extension/index.js'
import {
  getConversationWithProject,
  getProject,
  type Conversation,
  type Project,
  type Store,
  type TransitionRead,
} from '../store/index.js'

/**
 * Who may see what. Owners see their own; with a ProjectAuthz adapter registered, others see what it
 * grants, asked afresh on every request (so a revocation applies on the next one). With no adapter
 * the answer is exactly owner-only.
 */
export class ProjectAccess {
  readonly #store: Store
  readonly #adapter: () => ProjectAuthzAdapter | null

  constructor(store: Store, adapter: () => ProjectAuthzAdapter | null) {
    this.#store = store
    this.#adapter = adapter
  }

  get hasAdapter(): boolean {
    return this.#adapter() !== null
  }

  /** The live project if `userId` may perform `action` on it. */
  async project(
    userId: string,
    projectId: string,
    action: ProjectAction,
    known?: Project,
  ): Promise<Project | undefined> {
    // `known`: the project as just read with something else (saves reading it again).
    const project = known?.id === projectId ? known : await getProject(this.#store, projectId)
    if (project?.ownerId === userId) return project
    const adapter = this.#adapter()
    if (!adapter) return undefined
    // The adapter is asked for a missing project too: another user's project and no project at
    // all must take the same time, or the difference tells which ids exist.
    const allowed = await Promise.resolve(adapter.canAccessProject(userId, projectId, action)).catch(
      (error: unknown) => {
        if (project) throw error
        return false
      },
    )
    return project && allowed ? project : undefined
  }

  /** Ids of projects shared with the user (not owned), deduplicated; empty without an adapter. */
  async sharedProjectIds(userId: string): Promise<string[]> {
    const adapter = this.#adapter()
    if (!adapter) return []
    return [...new Set(await adapter.listSharedProjects(userId))].filter(
      (id) => typeof id === 'string' && id.length > 0,
    )
  }

  /** A live conversation the user may act in: one they own, in a project they may still read. */
  async conversation(userId: string, conversationId: string): Promise<Conversation | undefined> {
    return (await this.conversationInProject(userId, conversationId))?.conversation
  }

  /**
   * The same, with its project (no extra query). `known`: the pair as the caller just read it with
   * something else (checked the same way, not read again).
   */
  async conversationInProject(
    userId: string,
    conversationId: string,
    known?: { conversation: Conversation; project: Project },
  ): Promise<{ conversation: Conversation; project: Project } | undefined> {
    return this.conversationWithReads(userId, conversationId, {}, known)
  }

  /** The same, with `reads` made in the statement that reads the conversation (`getConversationWithProject`). */
  async conversationWithReads(
    userId: string,
    conversationId: string,
    reads: { [name: string]: TransitionRead },
    known?: { conversation: Conversation; project: Project },
  ): Promise<{ conversation: Conversation; project: Project; reads: { [name: string]: unknown } } | undefined> {
    const found =
      known?.conversation.id === conversationId
        ? { ...known, reads: {} }
        : await getConversationWithProject(this.#store, conversationId, reads)
    if (!found || found.conversation.ownerId !== userId) return undefined
    // A member whose access to the project was revoked loses its conversations too.
    const project = await this.project(userId, found.conversation.projectId, 'read', found.project)
    return project ? { conversation: found.conversation, project, reads: found.reads } : undefined
  }
}
