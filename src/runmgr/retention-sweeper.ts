import type { PluginLogger } from '../extension/index.js'
import {
  anyProjectRetention,
  deleteOldDispatches,
  deleteOldRunEvents,
  deleteUnnamedWorkBlobs,
  deleteStaleKnowledge,
  dropDeletedWork,
  lockRetentionSweep,
  pruneAuditLog,
  purgeIdleConversations,
  type Executor,
  type RetentionDays,
  type Store,
} from '../store/index.js'

/**
 * How long what is kept is kept (docs/guides/operating.md#retention); unset: for ever. A project may
 * shorten any but `auditDays` (the chain is one for the whole server).
 */
export interface RetentionSettings extends RetentionDays {
  /** Days the audit log keeps an entry; removing them needs the secretKey that signs the checkpoints. */
  auditDays?: number
  /** How often each instance sweeps (default 10 minutes). */
  sweepMs?: number
}

/** What one sweep deleted. */
export interface RetentionReport {
  runEvents: number
  dispatches: number
  knowledgeItems: number
  conversations: number
  auditEntries: number
  /** Stored work-directory content no file names (a sync that died before naming it), after an hour. */
  workBlobs: number
  /**
   * Deleted conversations whose files were still there: written after the deletion (an execution
   * finishing on another instance) or left by a deletion that could not remove them at once.
   */
  deletedConversationFiles: number
}

const batchSize = 5_000
// A purge touches every table of a conversation: fewer per transaction.
const conversationBatch = 100

/**
 * Deletes what is past its retention, in batches (each its own short transaction, so no long lock and
 * no huge WAL burst), on every instance in turn: a lock in the database lets one sweep at a time.
 */
export class RetentionSweeper {
  readonly #store: Store
  readonly #log: PluginLogger
  readonly #settings: RetentionSettings
  readonly #auditKey: string | undefined
  readonly #discardWorkDir: ((conversationId: string) => Promise<void>) | undefined
  readonly #evictWorkCaches: (() => Promise<number>) | undefined
  #timer: NodeJS.Timeout | undefined
  #running: Promise<RetentionReport> | null = null

  constructor(
    store: Store,
    log: PluginLogger,
    settings: RetentionSettings,
    hooks: {
      auditKey?: string
      discardWorkDir?: (conversationId: string) => Promise<void>
      /** Removes this instance's cached copies of conversations purged (on any instance); answers how many. */
      evictWorkCaches?: () => Promise<number>
    } = {},
  ) {
    this.#store = store
    this.#log = log
    this.#settings = settings
    this.#auditKey = hooks.auditKey
    this.#discardWorkDir = hooks.discardWorkDir
    this.#evictWorkCaches = hooks.evictWorkCaches
  }

  start(): void {
    // Always on: a project may set its own retention at any time (a sweep without any is two cheap reads).
    this.#timer = setInterval(() => void this.sweep(), this.#settings.sweepMs ?? 600_000)
    this.#timer.unref()
    void this.sweep()
  }

  stop(): void {
    clearInterval(this.#timer)
    this.#timer = undefined
  }

  /** One sweep (overlapping calls share it). */
  sweep(): Promise<RetentionReport> {
    this.#running ??= this.#sweep()
      .catch((error: unknown) => {
        this.#log.warn('the retention sweep failed; the next one tries again', { err: error })
        return emptyReport()
      })
      .finally(() => {
        this.#running = null
      })
    return this.#running
  }

  async #sweep(): Promise<RetentionReport> {
    const report = emptyReport()
    const s = this.#settings
    const serverWide =
      s.runEventsDays !== undefined ||
      s.idleConversationDays !== undefined ||
      s.dispatchDays !== undefined ||
      s.knowledgeDraftDays !== undefined
    if (serverWide || (await anyProjectRetention(this.#store))) {
      report.runEvents = await this.#batches(batchSize, (tx) => deleteOldRunEvents(tx, s.runEventsDays, batchSize))
      report.dispatches = await this.#batches(batchSize, (tx) => deleteOldDispatches(tx, s.dispatchDays, batchSize))
      report.knowledgeItems = await this.#batches(batchSize, (tx) =>
        deleteStaleKnowledge(tx, s.knowledgeDraftDays, batchSize),
      )
      report.conversations = await this.#batches(conversationBatch, async (tx) => {
        const purged = await purgeIdleConversations(tx, s.idleConversationDays, conversationBatch)
        return { count: purged.length, after: () => this.#discard(purged) }
      })
    }
    report.deletedConversationFiles = await this.dropDeletedWork()
    report.workBlobs = await this.#batches(batchSize, (tx) => deleteUnnamedWorkBlobs(tx, batchSize))
    const auditKey = this.#auditKey
    if (s.auditDays !== undefined && auditKey) {
      const before = new Date(Date.now() - s.auditDays * 86_400_000)
      report.auditEntries = await this.#batches(batchSize, (tx) => pruneAuditLog(tx, before, batchSize, auditKey))
    }
    // On every instance, not only the one that swept: each keeps its own copies of conversations' files.
    const evicted = await this.#evictWorkCaches?.().catch((error: unknown) => {
      this.#log.warn('retention: cached work directories of purged conversations could not be removed', { err: error })
      return 0
    })
    if (evicted) this.#log.info(`retention: removed the cached work directories of ${evicted} purged conversations`)
    const deleted = Object.entries(report).filter(([, count]) => count > 0)
    if (deleted.length > 0)
      this.#log.info(`retention: deleted ${deleted.map(([what, count]) => `${count} ${what}`).join(', ')}`, {
        ...report,
      })
    return report
  }

  /**
   * Drops the files of deleted conversations (of one conversation or project just deleted, or all) and
   * gives their room back; answers how many conversations had any. Deletion calls it at once, each sweep
   * again for what came later. Not under the sweep lock: skip-locked rows keep two callers apart.
   */
  async dropDeletedWork(scope: { conversationId: string } | { projectId: string } | Record<string, never> = {}) {
    let total = 0
    for (;;) {
      const ids = await this.#store.transaction((tx) => dropDeletedWork(tx, conversationBatch, scope))
      await this.#discard(ids)
      total += ids.length
      if (ids.length < conversationBatch) return total
    }
  }

  /** Runs `batch` in its own transaction under the sweep lock until it deletes fewer than `size`. */
  async #batches(
    size: number,
    batch: (tx: Executor) => Promise<number | { count: number; after: () => Promise<void> }>,
  ): Promise<number> {
    let total = 0
    for (;;) {
      const outcome = await this.#store.transaction(async (tx) => ((await lockRetentionSweep(tx)) ? batch(tx) : -1))
      const count = typeof outcome === 'number' ? outcome : outcome.count
      if (typeof outcome !== 'number') await outcome.after()
      if (count <= 0) return total
      total += count
      if (count < size) return total
    }
  }

  async #discard(conversationIds: string[]): Promise<void> {
    const discard = this.#discardWorkDir
    if (!discard) return
    for (const id of conversationIds) {
      await discard(id).catch((error: unknown) =>
        this.#log.warn(`the work directory of deleted conversation ${id} could not be removed`, {
          err: error,
        }),
      )
    }
  }
}

function emptyReport(): RetentionReport {
  return {
    runEvents: 0,
    dispatches: 0,
    knowledgeItems: 0,
    conversations: 0,
    auditEntries: 0,
    workBlobs: 0,
    deletedConversationFiles: 0,
  }
}
