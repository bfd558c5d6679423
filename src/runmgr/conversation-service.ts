import type { ProjectAccess } from '../cmdbus/index.js'
import {
  activeRunIds,
  createConversation,
  deleteConversation,
  getConversation,
  listConversations,
  listConversationsOf,
  listMessages,
  notFoundError,
  updateConversation,
  type Conversation,
  type Executor,
  type Message,
  type Page,
  type PageRequest,
  type Project,
  type Store,
  type TransitionRead,
  type User,
  listCompactions,
  type Compaction,
} from '../store/index.js'
import type { ProjectService } from './project-service.js'
import type { RunManager } from './run-manager.js'

/** A conversation as the API shows it: with the id of its active run. */
export type ConversationWithRun = Conversation & { activeRunId: string | null }

/**
 * Conversations as a caller sees them: their own, in projects they may still read. Anything else is
 * `not_found`, like a conversation that does not exist.
 */
export class ConversationService {
  readonly #store: Store
  readonly #access: ProjectAccess
  readonly #projects: ProjectService
  readonly #fullModeTtlMs: number
  readonly #runs: Pick<RunManager, 'endRunsOf' | 'dropDeletedWork'> | undefined

  constructor(
    store: Store,
    access: ProjectAccess,
    projects: ProjectService,
    options: { fullModeTtlMs: number; runs?: Pick<RunManager, 'endRunsOf' | 'dropDeletedWork'> },
  ) {
    this.#store = store
    this.#access = access
    this.#projects = projects
    this.#fullModeTtlMs = options.fullModeTtlMs
    this.#runs = options.runs
  }

  async resolve(user: User, conversationId: string): Promise<Conversation> {
    const conversation = await this.#access.conversation(user.id, conversationId)
    if (!conversation) throw notFoundError('conversation')
    return conversation
  }

  /** The same, with its project (one read); `reads` ride in that statement (`getConversationWithProject`). */
  async resolveWithProject(
    user: User,
    conversationId: string,
    reads: { [name: string]: TransitionRead } = {},
  ): Promise<{ conversation: Conversation; project: Project; reads: { [name: string]: unknown } }> {
    const found = await this.#access.conversationWithReads(user.id, conversationId, reads)
    if (!found) throw notFoundError('conversation')
    return found
  }

  /** Whether the user may still act in the conversation (an open stream's re-check). */
  async stillVisible(userId: string, conversationId: string): Promise<boolean> {
    return (await this.#access.conversation(userId, conversationId)) !== undefined
  }

  /** As `resolve`, with its active run. */
  async get(user: User, conversationId: string): Promise<ConversationWithRun> {
    return (await this.withActiveRuns([await this.resolve(user, conversationId)]))[0]!
  }

  /** Creates a conversation in `tx` (the caller's transaction) in a project resolved for `create_conversation`. */
  async create(tx: Executor, user: User, project: Project, title: string | undefined): Promise<ConversationWithRun> {
    return {
      ...(await createConversation(tx, {
        projectId: project.id,
        ownerId: user.id,
        ...(title !== undefined && { title }),
      })),
      activeRunId: null,
    }
  }

  /** The caller's conversations in a project they may read. */
  async listInProject(user: User, projectId: string, page: PageRequest): Promise<Page<ConversationWithRun>> {
    const project = await this.#projects.resolve(user, projectId)
    const found = await listConversations(this.#store, project.id, page, user.id)
    return { items: await this.withActiveRuns(found.items), nextCursor: found.nextCursor }
  }

  /** The caller's conversations across every project they can see, newest first. */
  async listMine(user: User, page: PageRequest): Promise<Page<ConversationWithRun>> {
    const found = await listConversationsOf(this.#store, user.id, await this.#projects.visibleIds(user.id), page)
    return { items: await this.withActiveRuns(found.items), nextCursor: found.nextCursor }
  }

  /**
   * Retitles a conversation the caller resolved. `reread`: its permission mode was just changed
   * (through the bus, which audits it), so it is read again first.
   */
  async update(
    conversation: Conversation,
    patch: { title?: string },
    options: { reread: boolean },
  ): Promise<ConversationWithRun> {
    let current = options.reread
      ? ((await getConversation(this.#store, conversation.id)) ?? conversation)
      : conversation
    if (patch.title !== undefined) {
      const before = current
      current = await this.#store.transaction((tx) =>
        updateConversation(tx, before, { title: patch.title }, { fullModeTtlMs: this.#fullModeTtlMs }),
      )
    }
    return (await this.withActiveRuns([current]))[0]!
  }

  /**
   * Deletes a conversation of the caller's (soft), then ends its runs (no new one can start by then)
   * and drops its work files.
   */
  async remove(user: User, conversationId: string): Promise<void> {
    const conversation = await this.resolve(user, conversationId)
    await this.#store.transaction((tx) => deleteConversation(tx, conversation))
    await this.#runs?.endRunsOf({ conversationId: conversation.id }, 'conversation_deleted')
    await this.#runs?.dropDeletedWork({ conversationId: conversation.id })
  }

  /** A conversation's transcript, oldest first. */
  async messages(user: User, conversationId: string, page: PageRequest): Promise<Page<Message>> {
    const conversation = await this.resolve(user, conversationId)
    return listMessages(this.#store, conversation.id, page)
  }

  /** A conversation's compactions, oldest first (docs/guides/agent-runs.md#context-compaction). */
  async compactions(user: User, conversationId: string, page: PageRequest): Promise<Page<Compaction>> {
    const conversation = await this.resolve(user, conversationId)
    return listCompactions(this.#store, conversation.id, page)
  }

  async withActiveRuns(conversations: readonly Conversation[]): Promise<ConversationWithRun[]> {
    const active = await activeRunIds(
      this.#store,
      conversations.map((conversation) => conversation.id),
    )
    return conversations.map((conversation) => ({ ...conversation, activeRunId: active.get(conversation.id) ?? null }))
  }
}
