import { createHash } from 'node:crypto'
import type { AccessSignals, AccessSubject, User } from '../store/index.js'

interface Entry {
  user: User
  tokenId: string
  expiresAt: number
}

/**
 * Authenticated tokens, so a request does not look its token up again: keyed by the token's hash
 * (never the token), dropped when any instance announces the token revoked or its user disabled
 * (the `plinth_access` notifications), and after `ttlMs` whatever happens — a bound should a
 * notification be missed. Bounded in size (oldest first out).
 */
export class TokenCache {
  readonly #entries = new Map<string, Entry>()
  readonly #ttlMs: number
  readonly #max: number

  constructor(access: AccessSignals, options: { ttlMs?: number; max?: number } = {}) {
    this.#ttlMs = options.ttlMs ?? 10_000
    this.#max = options.max ?? 10_000
    access.subscribe((subject) => this.forget(subject))
  }

  get(token: string): { user: User; tokenId: string } | undefined {
    const key = keyOf(token)
    const entry = this.#entries.get(key)
    if (!entry) return undefined
    if (entry.expiresAt <= Date.now()) {
      this.#entries.delete(key)
      return undefined
    }
    return entry
  }

  set(token: string, found: { user: User; tokenId: string }): void {
    if (this.#ttlMs <= 0) return
    if (this.#entries.size >= this.#max) this.#entries.delete(this.#entries.keys().next().value as string)
    this.#entries.set(keyOf(token), { ...found, expiresAt: Date.now() + this.#ttlMs })
  }

  /** Drops what a change of access may affect (`all`: everything). */
  forget(subject: AccessSubject): void {
    if (subject === 'all') {
      this.#entries.clear()
      return
    }
    const [kind, id] = subject.split(':') as [string, string]
    if (kind !== 'token' && kind !== 'user') return
    for (const [key, entry] of this.#entries) {
      if ((kind === 'token' && entry.tokenId === id) || (kind === 'user' && entry.user.id === id))
        this.#entries.delete(key)
    }
  }
}

function keyOf(token: string): string {
  return createHash('sha256').update(token).digest('base64')
}
