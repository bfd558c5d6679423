import type { ProjectAction } from '../extension/index.js'
import {
  deleteKnowledgeItem,
  getKnowledgeItem,
  knowledgeBytesOf,
  lockKnowledgeVolume,
  knowledgeItemText,
  RequestError,
  listKnowledgeChunks,
  listKnowledgeItems,
  notFoundError,
  publishKnowledgeItem,
  type KnowledgeChunk,
  type KnowledgeItem,
  type Page,
  type PageRequest,
  type Project,
  type Executor,
  type Store,
  type User,
} from '../store/index.js'

/** How a caller's project is resolved (the run manager's project service): `not_found` or `forbidden` otherwise. */
export interface ProjectResolver {
  resolve(user: User, projectId: string, action?: ProjectAction): Promise<Project>
}

/**
 * Project knowledge as a caller sees it: every published item of a project they can read, and their
 * own drafts. Anything else is `not_found`. Adding knowledge goes through the `Ingestor`.
 */
export class KnowledgeService {
  readonly #store: Store
  readonly #projects: ProjectResolver

  constructor(store: Store, projects: ProjectResolver) {
    this.#store = store
    this.#projects = projects
  }

  /** An item the caller may see (`ownerOnly`: only their own), in a project they can still read. */
  async item(user: User, itemId: string, options: { ownerOnly?: boolean } = {}): Promise<KnowledgeItem> {
    const item = await getKnowledgeItem(this.#store, itemId)
    const visible = item && (item.ownerId === user.id || (!options.ownerOnly && item.status === 'published'))
    if (!item || !visible) throw notFoundError('knowledge item')
    await this.#projects.resolve(user, item.projectId).catch(() => {
      throw notFoundError('knowledge item')
    })
    return item
  }

  /**
   * Refuses (`quota_exceeded`, 507) when `adding` bytes would take the user's knowledge past `limit`
   * (docs/security.md, "disk quotas").
   */
  async ensureVolume(user: User, adding: number, limit: number, tx?: Executor): Promise<void> {
    // Inside the transaction that adds the item: locked, so concurrent additions are checked in turn.
    if (tx) await lockKnowledgeVolume(tx, user.id)
    const held = await knowledgeBytesOf(tx ?? this.#store, user.id)
    if (held + adding > limit) {
      throw new RequestError(
        'quota_exceeded',
        `your knowledge would hold ${(held + adding).toLocaleString('en-US')} bytes; it is limited to ${limit.toLocaleString('en-US')} bytes (delete items to make room)`,
      )
    }
  }

  /** A project's knowledge the caller may see, newest first. */
  async list(user: User, projectId: string, page: PageRequest): Promise<Page<KnowledgeItem>> {
    const project = await this.#projects.resolve(user, projectId)
    return listKnowledgeItems(this.#store, project.id, user.id, page)
  }

  /** An item's extracted text, at most `maxChars` characters (the item as resolved by `item`); null before it is ready. */
  text(item: KnowledgeItem, maxChars: number): Promise<{ text: string; length: number } | null> {
    return knowledgeItemText(this.#store, item.id, maxChars)
  }

  /** An item's chunks, in order (the item as resolved by `item`). */
  /** An item's chunks once it is ready: before, they are a (perhaps interrupted) ingestion's partial work. */
  async chunks(item: KnowledgeItem, page: PageRequest): Promise<Page<KnowledgeChunk>> {
    if (item.ingestStatus !== 'ready') return { items: [], nextCursor: null }
    return listKnowledgeChunks(this.#store, item.id, page)
  }

  /** Publishes an item of the caller's: members of the project find it too (idempotent). */
  async publish(user: User, itemId: string): Promise<KnowledgeItem> {
    const item = await this.item(user, itemId, { ownerOnly: true })
    // Published, it would be found by no one: it has no chunks.
    if (item.ingestStatus === 'failed')
      throw new RequestError(
        'knowledge_not_ingested',
        `the item did not ingest (${item.ingestError ?? 'no reason recorded'}); upload it again`,
      )
    return (await this.#store.transaction((tx) => publishKnowledgeItem(tx, item.id))) ?? item
  }

  /** Deletes an item of the caller's (soft: searches stop finding it at once). */
  async remove(user: User, itemId: string): Promise<void> {
    const item = await this.item(user, itemId, { ownerOnly: true })
    await this.#store.transaction((tx) => deleteKnowledgeItem(tx, item))
  }
}
