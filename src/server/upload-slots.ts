import type { FastifyReply } from 'fastify'
import { HttpProblem } from './problem.js'

/** How many uploads (file PUTs and knowledge uploads) may be in flight. */
export interface UploadLimits {
  perUser: number
  total: number
}

export const defaultUploadLimits: UploadLimits = { perUser: 2, total: 8 }

/**
 * Counts uploads in flight, per user and in all (docs/security.md, "uploads"): past either cap the
 * request is answered 429 `too_many_uploads` with Retry-After, before its body is read. Bodies are
 * streamed to disk, so the caps bound open files and disk bandwidth more than memory.
 */
export class UploadSlots {
  readonly #limits: UploadLimits
  readonly #byUser = new Map<string, number>()
  #total = 0

  constructor(limits: UploadLimits = defaultUploadLimits) {
    this.#limits = limits
  }

  /** Takes a slot for `userId` or throws 429 (with Retry-After); call the returned function once the upload is done. */
  acquire(userId: string, reply: FastifyReply): () => void {
    const mine = this.#byUser.get(userId) ?? 0
    const refuse = (detail: string): never => {
      reply.header('retry-after', '1')
      throw new HttpProblem('too_many_uploads', detail)
    }
    if (mine >= this.#limits.perUser)
      refuse(`at most ${this.#limits.perUser} of your uploads may be in flight at once; retry when one has finished`)
    if (this.#total >= this.#limits.total)
      refuse(`the server takes at most ${this.#limits.total} uploads at once; retry in a moment`)
    this.#byUser.set(userId, mine + 1)
    this.#total++
    let released = false
    return () => {
      if (released) return
      released = true
      this.#total--
      const left = (this.#byUser.get(userId) ?? 1) - 1
      if (left <= 0) this.#byUser.delete(userId)
      else this.#byUser.set(userId, left)
    }
  }
}
