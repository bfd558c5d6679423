import type { FastifyBaseLogger } from 'fastify'
import { Counter, Gauge, type Registry } from 'prom-client'
import { isTokenLive, type AccessSubject, type Store } from '../store/index.js'
import { HttpProblem } from './problem.js'

/** Bounds on event streams, so no client holds unbounded server resources (docs/reference/events.md). */
export interface StreamLimits {
  /** Concurrent streams one token may hold. */
  maxPerToken: number
  /** Concurrent streams on this instance. */
  maxTotal: number
  /** A stream ends after this long; the client reconnects with its last event id. */
  maxLifetimeMs: number
  /** How often streams that depend on sharing re-ask the ProjectAuthz adapter. */
  recheckIntervalMs: number
  /** A client that has not taken a write within this long is dropped. */
  drainTimeoutMs: number
  /** Bytes of event data held for one stream (replay page, live queue). */
  maxQueuedBytes: number
}

export const defaultStreamLimits: StreamLimits = {
  maxPerToken: 32,
  maxTotal: 5000,
  maxLifetimeMs: 60 * 60 * 1000,
  recheckIntervalMs: 60_000,
  drainTimeoutMs: 30_000,
  maxQueuedBytes: 1024 * 1024,
}

/** Why the server ended a stream (`recheck_failed`: access could not be confirmed; reconnect). */
export type StreamEndReason = 'access_revoked' | 'max_lifetime' | 'recheck_failed' | 'shutdown'

export interface StreamAccess {
  userId: string
  tokenId: string
  /** The project the stream belongs to (a revocation of that project reaches it). */
  projectId: string
  /** True when the caller sees the project through sharing, not ownership. */
  shared: boolean
  /** Asks again whether the caller may still see what the stream shows. */
  recheck(): Promise<boolean>
}

export interface StreamHandle {
  /** Aborted when the server ends the stream; `reason` says why. */
  readonly signal: AbortSignal
  readonly reason: StreamEndReason | null
  release(): void
}

interface OpenStream {
  access: StreamAccess
  controller: AbortController
  reason: StreamEndReason | null
  timer: NodeJS.Timeout
  checking: boolean
}

/** How long recent access changes are remembered for streams that are still opening. */
const recentWindowMs = 30_000

/**
 * Every open event stream of this instance: enforces the per-token and total caps and the maximum
 * lifetime, and ends streams whose access is gone. Access changes arrive from the store (NOTIFY, so
 * from every instance): a revoked token, a disabled user, a deleted project or a ProjectAuthz change.
 * Affected streams re-check (token live, resource still visible) and end with `access_revoked`.
 * Streams that see a project through sharing also re-check periodically, for adapters whose answers
 * change without an announcement.
 */
export class StreamRegistry {
  readonly limits: StreamLimits
  readonly #store: Store
  readonly #log: FastifyBaseLogger
  readonly #streams = new Set<OpenStream>()
  readonly #perToken = new Map<string, number>()
  readonly #recent: Array<{ subject: AccessSubject; at: number }> = []
  readonly #openGauge: Gauge | undefined
  readonly #ended: Counter<'reason'> | undefined
  #unsubscribe: (() => void) | null = null
  #timer: NodeJS.Timeout | null = null

  constructor(store: Store, limits: StreamLimits, log: FastifyBaseLogger, metrics?: Registry) {
    this.#store = store
    this.limits = limits
    this.#log = log
    if (metrics) {
      this.#openGauge = new Gauge({ name: 'plinth_sse_streams', help: 'Open event streams', registers: [metrics] })
      this.#ended = new Counter({
        name: 'plinth_sse_streams_ended_total',
        help: 'Event streams the server ended, by reason (slow_consumer: dropped for not reading)',
        labelNames: ['reason'] as const,
        registers: [metrics],
      })
    }
  }

  start(): void {
    this.#unsubscribe = this.#store.access.subscribe((subject) => this.#onAccessChange(subject))
    this.#timer = setInterval(() => this.#recheck((stream) => stream.access.shared), this.limits.recheckIntervalMs)
    this.#timer.unref()
  }

  stop(): void {
    this.#unsubscribe?.()
    if (this.#timer) clearInterval(this.#timer)
  }

  get size(): number {
    return this.#streams.size
  }

  /** Registers a stream before its headers are sent; over a cap it is a 429 `too_many_streams`. */
  open(access: StreamAccess, openedAt: number): StreamHandle {
    const held = this.#perToken.get(access.tokenId) ?? 0
    if (held >= this.limits.maxPerToken) {
      throw new HttpProblem(
        'too_many_streams',
        `this token already holds ${held} open streams (limit ${this.limits.maxPerToken}); close one first`,
        {
          limit: this.limits.maxPerToken,
        },
      )
    }
    if (this.#streams.size >= this.limits.maxTotal) {
      throw new HttpProblem(
        'too_many_streams',
        `the server holds its maximum of ${this.limits.maxTotal} open streams; retry later`,
        {
          limit: this.limits.maxTotal,
        },
      )
    }
    const controller = new AbortController()
    const stream: OpenStream = {
      access,
      controller,
      reason: null,
      checking: false,
      timer: setTimeout(() => this.#end(stream, 'max_lifetime'), this.limits.maxLifetimeMs),
    }
    stream.timer.unref()
    this.#streams.add(stream)
    this.#perToken.set(access.tokenId, held + 1)
    this.#openGauge?.inc()
    // A change announced while the request was being authorized would otherwise be missed.
    if (this.#recent.some((change) => change.at >= openedAt && matches(change.subject, stream)))
      void this.#check(stream)
    let released = false
    return {
      signal: controller.signal,
      get reason() {
        return stream.reason
      },
      release: () => {
        if (released) return
        released = true
        clearTimeout(stream.timer)
        this.#streams.delete(stream)
        const count = (this.#perToken.get(access.tokenId) ?? 1) - 1
        if (count <= 0) this.#perToken.delete(access.tokenId)
        else this.#perToken.set(access.tokenId, count)
        this.#openGauge?.dec()
      },
    }
  }

  /** Counts a client dropped for not reading (the stream ends on its own). */
  countDropped(): void {
    this.#ended?.inc({ reason: 'slow_consumer' })
  }

  /** Ends every stream with `shutdown`. */
  shutdown(): void {
    for (const stream of this.#streams) this.#end(stream, 'shutdown')
  }

  #onAccessChange(subject: AccessSubject): void {
    const now = Date.now()
    this.#recent.push({ subject, at: now })
    while (this.#recent.length > 0 && this.#recent[0]!.at < now - recentWindowMs) this.#recent.shift()
    if (this.#recent.length > 1000) this.#recent.splice(0, this.#recent.length - 1000)
    void this.#recheck((stream) => matches(subject, stream))
  }

  async #recheck(which: (stream: OpenStream) => boolean): Promise<void> {
    const affected = [...this.#streams].filter(which)
    // A few at a time: a change that touches thousands of streams must not flood the pool.
    for (let index = 0; index < affected.length; index += 8) {
      await Promise.all(affected.slice(index, index + 8).map((stream) => this.#check(stream)))
    }
  }

  async #check(stream: OpenStream): Promise<void> {
    if (stream.reason || stream.checking) return
    stream.checking = true
    try {
      const allowed = (await isTokenLive(this.#store, stream.access.tokenId)) && (await stream.access.recheck())
      if (!allowed) this.#end(stream, 'access_revoked')
    } catch (error) {
      // Unsure is not allowed: a stream whose access cannot be confirmed ends; the client reconnects.
      this.#log.warn({ err: error }, 'could not re-check a stream’s access; ending it')
      this.#end(stream, 'recheck_failed')
    } finally {
      stream.checking = false
    }
  }

  #end(stream: OpenStream, reason: StreamEndReason): void {
    if (stream.reason) return
    stream.reason = reason
    clearTimeout(stream.timer)
    this.#ended?.inc({ reason })
    stream.controller.abort(reason)
  }
}

function matches(subject: AccessSubject, stream: OpenStream): boolean {
  if (subject === 'all') return true
  const [kind, id] = subject.split(':', 2) as [string, string]
  if (kind === 'token') return stream.access.tokenId === id
  if (kind === 'user') return stream.access.userId === id
  return stream.access.projectId === id
}
