import type { AccessSignals, AccessSubject } from '../store/index.js'

interface Entry<T> {
  userId: string
  value: T
  expiresAt: number
}

/**
 * Answers of `GET /api/projects`, so a repeated listing costs no query: per user, page size and
 * cursor. Any project's change or a change of sharing (`project:` and `all` on `plinth_access`, from
 * this or any instance; this instance's own writes also drop it before they answer) empties it, a
 * disabled user's entries go, and every entry lapses after `ttlMs` whatever happens — the bound for a
 * ProjectAuthz adapter that changes its answers without saying so. Bounded in size (oldest first out).
 */
export class ProjectListCache<T> {
  readonly #entries = new Map<string, Entry<T>>()
  readonly #ttlMs: number
  readonly #max: number
  #generation = 0

  constructor(access: AccessSignals, options: { ttlMs?: number; max?: number } = {}) {
    this.#ttlMs = options.ttlMs ?? 2_000
    this.#max = options.max ?? 5_000
    access.subscribe((subject) => this.forget(subject))
  }

  get(userId: string, limit: number, cursor: string | undefined): T | undefined {
    const key = keyOf(userId, limit, cursor)
    const entry = this.#entries.get(key)
    if (!entry) return undefined
    if (entry.expiresAt <= Date.now()) {
      this.#entries.delete(key)
      return undefined
    }
    return entry.value
  }

  /** Taken before reading what `set` will store: a change announced meanwhile makes that `set` a no-op. */
  get generation(): number {
    return this.#generation
  }

  set(userId: string, limit: number, cursor: string | undefined, value: T, generation: number): void {
    if (this.#ttlMs <= 0 || generation !== this.#generation) return
    if (this.#entries.size >= this.#max) this.#entries.delete(this.#entries.keys().next().value as string)
    this.#entries.set(keyOf(userId, limit, cursor), { userId, value, expiresAt: Date.now() + this.#ttlMs })
  }

  forget(subject: AccessSubject): void {
    if (subject.startsWith('token:')) return
    this.#generation++
    if (subject.startsWith('user:')) {
      const id = subject.slice('user:'.length)
      for (const [key, entry] of this.#entries) if (entry.userId === id) this.#entries.delete(key)
      return
    }
    // A project (or everything) changed: whose lists show it is not known, so none is kept.
    this.#entries.clear()
  }
}

function keyOf(userId: string, limit: number, cursor: string | undefined): string {
  return `${userId}\n${limit}\n${cursor ?? ''}`
}
