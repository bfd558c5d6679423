import type { ProjectAction, ProjectAuthzAdapter } from '../extension/index.js'
import { getConversation, getProject, type Conversation, type Project, type Store } from '../store/index.js'

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
  async project(userId: string, projectId: string, action: ProjectAction): Promise<Project | undefined> {
    const project = await getProject(this.#store.db, projectId)
    if (project?.ownerId === userId) return project
    const adapter = this.#adapter()
    if (!adapter) return undefined
    // The adapter is asked for a missing project too: another user's project and no project at
    // all must take the same time, or the difference tells which ids exist.
    const allowed = await Promise.resolve(adapter.canAccessProject(userId, projectId, action)).catch((error: unknown) => {
      if (project) throw error
      return false
    })
    return project && allowed ? project : undefined
  }

  /** Ids of projects shared with the user (not owned), deduplicated; empty without an adapter. */
  async sharedProjectIds(userId: string): Promise<string[]> {
    const adapter = this.#adapter()
    if (!adapter) return []
    return [...new Set(await adapter.listSharedProjects(userId))].filter((id) => typeof id === 'string' && id.length > 0)
  }

  /** A live conversation the user may act in: one they own, in a project they may still read. */
  async conversation(userId: string, conversationId: string): Promise<Conversation | undefined> {
    return (await this.conversationInProject(userId, conversationId))?.conversation
  }

  /** The same, with its project (no extra query). */
  async conversationInProject(userId: string, conversationId: string): Promise<{ conversation: Conversation; project: Project } | undefined> {
    const conversation = await getConversation(this.#store.db, conversationId)
    if (!conversation || conversation.ownerId !== userId) return undefined
    // A member whose access to the project was revoked loses its conversations too.
    const project = await this.project(userId, conversation.projectId, 'read')
    return project ? { conversation, project } : undefined
  }
}
