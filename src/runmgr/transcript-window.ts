import { readTranscriptAfter, readTranscriptTail, type Executor, type TranscriptMessage, type TranscriptRow } from '../store/index.js'

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

  /** The window as the database holds it now, oldest first. */
  async read(): Promise<TranscriptMessage[]> {
    const last = this.#rows?.at(-1)
    if (!this.#rows || !last) {
      this.#rows = await readTranscriptTail(this.#db, this.#conversationId, this.#maxChars, this.#maxRows)
      return this.#rows
    }
    const added = await readTranscriptAfter(this.#db, this.#conversationId, last.id, this.#maxRows)
    if (added.length > 0) this.#rows = cut([...this.#rows, ...added], this.#maxChars, this.#maxRows)
    return this.#rows
  }
}

/** The newest rows that fit: the same rule as readTranscriptTail (a row counts if what is newer leaves it room). */
function cut(rows: TranscriptRow[], maxChars: number, maxRows: number): TranscriptRow[] {
  let through = 0
  let keep = 0
  for (let index = rows.length - 1; index >= 0 && keep < maxRows; index--) {
    if (through >= maxChars) break
    through += rows[index]!.size
    keep++
  }
  return rows.slice(rows.length - keep)
}
