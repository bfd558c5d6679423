import {
  getRun,
  quotaQueuePosition,
  lastEventId,
  listRuns,
  notFoundError,
  readEvents,
  runLogPoint,
  runMessages,
  usageReport,
  type Message,
  type Page,
  type PageRequest,
  type Run,
  type RunStatus,
  type Store,
  type User,
  type UsageFilter,
  type UsageGrouping,
  type UsageReport,
} from '../store/index.js'
import type { ConversationService } from './conversation-service.js'
import type { ProjectService } from './project-service.js'

/** Runs as their owner sees them: their own, in conversations they may still act in; else `not_found`. */
export class RunQueries {
  readonly #store: Store
  readonly #projects: ProjectService
  readonly #conversations: ConversationService

  constructor(store: Store, projects: ProjectService, conversations: ConversationService) {
    this.#store = store
    this.#projects = projects
    this.#conversations = conversations
  }

  /**
   * Model usage and cost (docs/guides/operating.md#usage-and-cost): a user's own calls, or (the admin's
   * report, `filter.userId` absent) everyone's.
   */
  async usage(
    filter: UsageFilter,
    grouping?: { by: UsageGrouping; limit: number; after?: string },
  ): Promise<UsageReport> {
    return usageReport(this.#store, filter, grouping)
  }

  /** A run of the caller's whose conversation they may still act in. */
  async resolve(user: User, runId: string): Promise<Run> {
    const run = await this.own(user, runId)
    await this.#conversations.resolve(user, run.conversationId)
    // A run waiting for a quota says where it stands.
    if (run.status === 'queued' && run.queuedFor === 'quota')
      run.queuePosition = await quotaQueuePosition(this.#store, run)
    return run
  }

  /** A run of the caller's (its conversation not yet checked). */
  async own(user: User, runId: string): Promise<Run> {
    const run = await getRun(this.#store, runId)
    if (!run || run.ownerId !== user.id) throw notFoundError('run')
    return run
  }

  /** A run by id, unchecked: for a run this request itself created (or an idempotent replay of it). */
  get(runId: string): Promise<Run | undefined> {
    return getRun(this.#store, runId)
  }

  /** The caller's runs across the projects they can see, newest first. */
  async listMine(user: User, statuses: readonly RunStatus[] | undefined, page: PageRequest): Promise<Page<Run>> {
    return listRuns(
      this.#store,
      {
        ownerId: user.id,
        projectIds: await this.#projects.visibleIds(user.id),
        ...(statuses && { statuses }),
        // A deleted (or purged) conversation's runs stay for usage, but are not listed: they cannot be opened.
        openConversations: true,
      },
      page,
    )
  }

  /** A conversation's runs, newest first. */
  async ofConversation(
    user: User,
    conversationId: string,
    statuses: readonly RunStatus[] | undefined,
    page: PageRequest,
  ): Promise<Page<Run>> {
    const conversation = await this.#conversations.resolve(user, conversationId)
    return listRuns(this.#store, { conversationId: conversation.id, ...(statuses && { statuses }) }, page)
  }

  /** The messages a run added. */
  messages(runId: string): Promise<Message[]> {
    return runMessages(this.#store, runId)
  }

  /** Whether the run has any event after `afterId` (a finished run's stream has nothing left to send otherwise). */
  async hasEventsAfter(runId: string, afterId: number): Promise<boolean> {
    return (await readEvents(this.#store, { runId }, afterId, 1)).length > 0
  }

  /** The run's last event id and, while it waits for action, the id of the status event that says so. */
  logPoint(runId: string): Promise<{ lastId: number; waitingAt: number | null; waitingSince: number | null }> {
    return runLogPoint(this.#store, runId)
  }

  /** The newest event id of the whole log: a stream that must see only what happens from now on starts after it. */
  lastEventId(): Promise<number> {
    return lastEventId(this.#store)
  }
}
