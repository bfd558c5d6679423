import type { AccessSignals, AccessSubject } from '../store/index.js'

interface Entry {
  userId: string
  body: Buffer
  expiresAt: number
}

/**
 * Answers of `GET /api/projects`, so a repeated listing costs no query: per user, page size and
 * cursor. Any project's change or a change of sharing (`project:` and `all` on `plinth_access`, from
 * this or any instance; this instance's own writes also drop it before they answer) empties it, a
 * disabled user's entries go, and every entry lapses after `ttlMs` whatever happens — the bound for a
 * ProjectAuthz adapter that changes its answers without saying so. Bounded in bytes (oldest first out;
 * lapsed entries go as new ones come).
 */
export class ProjectListCache {
  readonly #entries = new Map<string, Entry>()
  readonly #ttlMs: number
  readonly #maxBytes: number
  #bytes = 0
  #generation = 0

  constructor(access: AccessSignals, options: { ttlMs?: number; maxBytes?: number } = {}) {
    this.#ttlMs = options.ttlMs ?? 2_000
    this.#maxBytes = options.maxBytes ?? 8 * 1024 * 1024
    access.subscribe((subject) => this.forget(subject))
  }

  /** The serialised answer, when one is kept. */
  get(userId: string, limit: number, cursor: string | undefined): Buffer | undefined {
    const key = keyOf(userId, limit, cursor)
    const entry = this.#entries.get(key)
    if (!entry) return undefined
    if (entry.expiresAt <= Date.now()) {
      this.#delete(key, entry)
      return undefined
    }
    return entry.body
  }

  /** Taken before reading what `set` will store: a change announced meanwhile makes that `set` a no-op. */
  get generation(): number {
    return this.#generation
  }

  set(userId: string, limit: number, cursor: string | undefined, body: Buffer, generation: number): void {
    if (this.#ttlMs <= 0 || generation !== this.#generation || body.length > this.#maxBytes / 4) return
    const key = keyOf(userId, limit, cursor)
    const previous = this.#entries.get(key)
    if (previous) this.#delete(key, previous)
    const now = Date.now()
    // Entries are in insertion order, which is expiry order (one TTL): the lapsed and the oldest go first.
    for (const [oldest, entry] of this.#entries) {
      if (entry.expiresAt > now && this.#bytes + body.length <= this.#maxBytes) break
      this.#delete(oldest, entry)
    }
    this.#entries.set(key, { userId, body, expiresAt: now + this.#ttlMs })
    this.#bytes += body.length
  }

  forget(subject: AccessSubject): void {
    if (subject.startsWith('token:')) return
    this.#generation++
    if (subject.startsWith('user:')) {
      const id = subject.slice('user:'.length)
      for (const [key, entry] of this.#entries) if (entry.userId === id) this.#delete(key, entry)
      return
    }
    // A project (or everything) changed: whose lists show it is not known, so none is kept.
    this.#entries.clear()
    this.#bytes = 0
  }

  #delete(key: string, entry: Entry): void {
    this.#entries.delete(key)
    this.#bytes -= entry.body.length
  }
}

function keyOf(userId: string, limit: number, cursor: string | undefined): string {
  return `${userId}\n${limit}\n${cursor ?? ''}`
}
