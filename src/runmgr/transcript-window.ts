import type { LanguageModel } from '../llm/index.js'
import {
  latestKept,
  readTranscriptAfter,
  readTranscriptTail,
  transcriptAfterRead,
  type Executor,
  type TranscriptRow,
  type TransitionRead,
} from '../store/index.js'

/**
 * The conversation's tail as far as the model's window reaches, kept by a run's driver: read once,
 * then extended with what was written after it. A round re-reads only the few messages the last one
 * added, not a long conversation's whole window.
 */
export class TranscriptWindow {
  readonly #db: Executor
  readonly #conversationId: string
  readonly #maxChars: number
  readonly #maxRows: number
  #rows: TranscriptRow[] | undefined

  constructor(db: Executor, conversationId: string, maxChars: number, maxRows = 2000) {
    this.#db = db
    this.#conversationId = conversationId
    this.#maxChars = maxChars
    this.#maxRows = maxRows
  }

  /** Starts the window from rows read elsewhere (by the statement that started the run), cut to size. */
  seed(rows: TranscriptRow[]): void {
    this.#rows = cut(rows, this.#maxChars, this.#maxRows)
  }

  /** The window as the database holds it now, oldest first. */
  async read(): Promise<TranscriptRow[]> {
    const last = this.#rows?.at(-1)
    if (!this.#rows || !last) {
      this.#rows = await readTranscriptTail(this.#db, this.#conversationId, this.#maxChars, this.#maxRows)
      return this.#rows
    }
    return this.extend(await readTranscriptAfter(this.#db, this.#conversationId, last.id, this.#maxRows))
  }

  /**
   * Once the window holds rows: the read of what was added after them, as a subquery for the caller's
   * next statement to carry (then `extend` with its rows) instead of a query of its own.
   */
  addedRead(): TransitionRead | undefined {
    const last = this.#rows?.at(-1)
    return last && transcriptAfterRead(this.#conversationId, last.id, this.#maxRows)
  }

  /** Leaves out the rows a compaction now stands for (through `messageId`). */
  dropThrough(messageId: string): void {
    if (this.#rows) this.#rows = this.#rows.filter((row) => row.id > messageId)
  }

  /** The window with rows read after it (by `read` or a statement that carried `addedRead`). */
  extend(added: TranscriptRow[]): TranscriptRow[] {
    if (!this.#rows) throw new Error('the transcript window was not read yet')
    if (added.length > 0) this.#rows = cut([...this.#rows, ...added], this.#maxChars, this.#maxRows)
    return this.#rows
  }
}

/** How many characters of a conversation's tail a run's window keeps for `model` (room to trim by whole turns). */
export function transcriptBudget(model: Pick<LanguageModel, 'contextWindow'>): number {
  return Math.ceil(model.contextWindow * 0.7 * 4 * 1.5)
}

/**
 * The newest rows that fit: the same rule as readTranscriptTail (a row counts if what is newer leaves it
 * room; the latest `latestKept` count whatever their size, and the rows back to their question when
 * those fit in `maxChars` more).
 */
function cut(rows: TranscriptRow[], maxChars: number, maxRows: number): TranscriptRow[] {
  let through = 0
  let keep = 0
  for (let index = rows.length - 1; index >= 0 && keep < maxRows; index--) {
    if (through >= maxChars) break
    through += rows[index]!.size
    keep++
  }
  const sixth = Math.max(0, rows.length - latestKept)
  let floor = sixth
  while (floor > 0 && rows[floor]!.role !== 'user' && rows.length - floor < maxRows) floor--
  if (rows[floor]?.role !== 'user') floor = sixth
  let sixThrough = 0
  for (let index = sixth; index < rows.length; index++) sixThrough += rows[index]!.size
  let floorBefore = 0
  for (let index = floor + 1; index < rows.length; index++) floorBefore += rows[index]!.size
  const from = floorBefore < sixThrough + maxChars ? floor : sixth
  return rows.slice(Math.min(rows.length - keep, from))
}

/**
 * Transcript windows kept between runs, per conversation, by the instance that ran them: the next run's
 * start then reads only the messages written after the window's last one, not the whole window again.
 *
 * Sound because a message the window holds no longer changes: the window reads messages once their
 * round is over (a run's only updates are to the assistant message its current round streams into), and
 * messages are only ever deleted with their conversation. A conversation's newer messages, written here
 * or by another instance, come with the next run's start; its newest compaction too
 * (docs/guides/agent-runs.md#the-transcript-window).
 */
export class WindowCache {
  readonly #entries = new Map<string, { maxChars: number; rows: readonly TranscriptRow[]; size: number }>()
  readonly #capacity: number
  #size = 0

  /** `capacity`: the characters (counted as the window counts them) kept across all conversations. */
  constructor(capacity = 4_000_000) {
    this.#capacity = capacity
  }

  /** The window last kept for `conversationId` with this size, if any (it becomes the most recently used). */
  get(conversationId: string, maxChars: number): readonly TranscriptRow[] | undefined {
    const entry = this.#entries.get(conversationId)
    if (!entry || entry.maxChars !== maxChars) return undefined
    this.#entries.delete(conversationId)
    this.#entries.set(conversationId, entry)
    return entry.rows
  }

  /** Keeps a window read as the database holds it (a window with a message still streaming is not kept). */
  put(conversationId: string, maxChars: number, rows: readonly TranscriptRow[]): void {
    this.drop(conversationId)
    if (rows.length === 0 || rows.some((row) => row.status === 'streaming')) return
    const size = rows.reduce((sum, row) => sum + row.size, 0)
    if (size > this.#capacity) return
    this.#entries.set(conversationId, { maxChars, rows, size })
    this.#size += size
    // The least recently used go first.
    for (const [id, entry] of this.#entries) {
      if (this.#size <= this.#capacity) break
      this.#entries.delete(id)
      this.#size -= entry.size
    }
  }

  drop(conversationId: string): void {
    const entry = this.#entries.get(conversationId)
    if (!entry) return
    this.#entries.delete(conversationId)
    this.#size -= entry.size
  }

  /** How many conversations' windows are kept. */
  get count(): number {
    return this.#entries.size
  }
}
