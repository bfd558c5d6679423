import { setMaxListeners } from 'node:events'
import { hostname } from 'node:os'
import {
  appendEvents,
  claimMessages,
  disableIfFailing,
  projectOwnerOf,
  recordAttempts,
  recordFailure,
  releaseWebhookClaims,
  type AttemptOutcome,
  type ClaimedMessage,
  type Store,
} from '../store/index.js'
import { WebhookPoster } from './http-post.js'
import { renderPayload } from './payload.js'
import { nextAttempt } from './retry-schedule.js'
import { webhookLimits, type WebhookSettings } from './settings.js'
import { signedHeaders } from './signature.js'
import { withinTraceParent } from '../telemetry/index.js'

/** What the deliverer logs through (pino's shape). */
export interface WebhookLog {
  info(fields: object, message: string): void
  warn(fields: object, message: string): void
}

export interface DelivererOptions {
  log?: WebhookLog
  /** Embedded database: every claim found at start is a dead process's. */
  exclusive?: boolean
  /** How often due messages are looked for without a wake-up (retries scheduled elsewhere); default 1 s. */
  pollMs?: number
}

/**
 * The outbox's worker, in every instance: claims due messages (leases in the database, so each
 * attempt is made by one instance), signs and POSTs them, records each attempt, schedules retries, and
 * disables a subscription that keeps failing (with a `webhook.disabled` event). It wakes when messages
 * are committed — the outbox's NOTIFY, from this instance or any other — when a retry it scheduled
 * falls due, and on a slow poll (retries scheduled elsewhere, redeliveries).
 */
export class WebhookDeliverer {
  readonly #store: Store
  readonly #settings: WebhookSettings
  readonly #options: DelivererOptions
  readonly #poster: WebhookPoster
  readonly #owner = `${hostname()}:${process.pid}:${Math.random().toString(36).slice(2, 10)}`
  readonly #inFlight = new Set<Promise<void>>()
  readonly #stopping = new AbortController()
  #claiming: Promise<void> | null = null
  #claimAgain = false
  #backlog = false
  #unsubscribe: (() => void) | null = null
  #poll: NodeJS.Timeout | null = null
  #retryTimer: { at: number; timer: NodeJS.Timeout } | null = null
  #retries: number[] = []
  // Outcomes waiting to be recorded, written together (one statement for all that finished meanwhile).
  #toRecord: Array<{ message: ClaimedMessage; outcome: AttemptOutcome; done: (error?: unknown) => void }> = []
  #recording: Promise<void> | null = null
  #closed = false

  constructor(store: Store, settings: WebhookSettings, options: DelivererOptions = {}) {
    this.#store = store
    this.#settings = settings
    this.#options = options
    // Every attempt in flight listens for the stop.
    setMaxListeners(0, this.#stopping.signal)
    this.#poster = new WebhookPoster({
      allowPrivate: settings.allowPrivate,
      timeoutMs: settings.timeoutMs,
      maxResponseBytes: webhookLimits.maxResponseBytes,
    })
  }

  /** A claim outlives its attempt's deadline by this much (time to record the outcome). */
  get leaseMs(): number {
    return this.#settings.timeoutMs + 5_000
  }

  async start(): Promise<void> {
    if (this.#options.exclusive) await releaseWebhookClaims(this.#store)
    this.#unsubscribe = this.#store.webhooks.subscribe(() => this.poke())
    this.#poll = setInterval(() => this.poke(), this.#options.pollMs ?? 1000)
    this.#poll.unref()
    this.poke()
  }

  /** Looks for due messages now (coalesced with a look already under way). */
  poke(): void {
    if (this.#closed) return
    if (this.#claiming) {
      this.#claimAgain = true
      return
    }
    this.#claiming = this.#claim().finally(() => {
      this.#claiming = null
      if (this.#claimAgain) {
        this.#claimAgain = false
        this.poke()
      }
    })
  }

  /** Stops claiming; attempts in flight are cut short and left due at once (for the next instance or start). */
  async stop(): Promise<void> {
    this.#closed = true
    this.#unsubscribe?.()
    if (this.#poll) clearInterval(this.#poll)
    if (this.#retryTimer) clearTimeout(this.#retryTimer.timer)
    this.#stopping.abort()
    await this.#claiming
    await Promise.all([...this.#inFlight])
    this.#poster.close()
  }

  async #claim(): Promise<void> {
    try {
      for (;;) {
        if (this.#closed) return
        const room = webhookLimits.concurrency - this.#inFlight.size
        if (room < webhookLimits.concurrency / 2) {
          // Nearly full: the attempts finishing free the slots, and claim then.
          this.#backlog = true
          return
        }
        const claimed = await claimMessages(this.#store, this.#owner, room, this.leaseMs)
        for (const message of claimed) {
          const attempt = this.#attempt(message).finally(() => {
            this.#inFlight.delete(attempt)
            // More may be due (the last claim filled its room): claim again once half the slots are free
            // (a claim costs about as much for 1 row as for 32). Otherwise the next NOTIFY or timer wakes it.
            if (!this.#closed && this.#backlog && this.#inFlight.size <= webhookLimits.concurrency / 2) this.poke()
          })
          this.#inFlight.add(attempt)
        }
        this.#backlog = claimed.length === room
        if (!this.#backlog) return
      }
    } catch (error) {
      this.#options.log?.warn(
        { err: error },
        'webhook delivery: could not claim messages (retrying on the next wake-up)',
      )
    }
  }

  async #attempt(message: ClaimedMessage): Promise<void> {
    const startedAt = new Date()
    try {
      const payload = message.payload ?? renderPayload(message)
      const secrets = message.previousSecret ? [message.secret, message.previousSecret] : [message.secret]
      const headers = signedHeaders(secrets, `msg_${message.id}`, payload)
      // The delivery's span continues the trace that committed the event (docs/guides/operating.md#tracing).
      const result = await withinTraceParent(message.traceParent, () =>
        this.#poster.post(new URL(message.url), payload, headers, this.#stopping.signal),
      )
      const interrupted = this.#stopping.signal.aborted && result.error !== null
      const failedAt = Date.now()
      const retryAt =
        result.error === null
          ? null
          : interrupted
            ? new Date(failedAt)
            : nextAttempt(message.attempt, failedAt, message.windowStart.getTime(), this.#settings)
      const outcome: AttemptOutcome = {
        startedAt,
        durationMs: result.durationMs,
        statusCode: result.statusCode,
        error: result.error,
        result: result.error === null ? 'delivered' : interrupted ? 'interrupted' : retryAt ? 'retry' : 'failed',
        nextAttemptAt: retryAt,
        payload,
      }
      if (outcome.result === 'failed') await this.#failForGood(message, outcome)
      else await this.#record(message, outcome)
      if (outcome.result === 'retry' && retryAt) this.#wakeAt(retryAt.getTime())
    } catch (error) {
      // Rendering or recording failed (the database is away): the claim runs out and the message is due again.
      this.#options.log?.warn(
        { err: error, webhookId: message.webhookId, deliveryId: message.id },
        'webhook delivery: attempt not recorded',
      )
    }
  }

  /** Records an outcome with the others that finished meanwhile (group commit). */
  #record(message: ClaimedMessage, outcome: AttemptOutcome): Promise<void> {
    const recorded = new Promise<void>((resolve, reject) =>
      this.#toRecord.push({ message, outcome, done: (error) => (error ? reject(error) : resolve()) }),
    )
    this.#flush()
    return recorded
  }

  #flush(): void {
    if (this.#recording) return
    this.#recording = (async () => {
      while (this.#toRecord.length > 0) {
        const batch = this.#toRecord.splice(0, 200)
        try {
          await recordAttempts(this.#store, this.#owner, batch)
          for (const entry of batch) entry.done()
        } catch (error) {
          for (const entry of batch) entry.done(error)
        }
      }
    })().finally(() => {
      this.#recording = null
      // Pushed after the loop's last look.
      if (this.#toRecord.length > 0) this.#flush()
    })
  }

  /** The message failed for good: recorded, and the subscription disabled when its failures have run long enough. */
  async #failForGood(message: ClaimedMessage, outcome: AttemptOutcome): Promise<void> {
    const { disableAfter, retryWindowMs } = this.#settings
    const disabled = await this.#store.transaction(async (tx) => {
      if (!(await recordFailure(tx, message, this.#owner, outcome))) return undefined
      const webhook = await disableIfFailing(tx, message.webhookId, disableAfter, retryWindowMs)
      if (!webhook) return undefined
      const ownerId = await projectOwnerOf(tx, webhook.projectId)
      await appendEvents(tx, [
        {
          type: 'webhook.disabled',
          projectId: webhook.projectId,
          userId: ownerId ?? null,
          data: { webhookId: webhook.id, url: webhook.url, reason: webhook.disabledReason ?? 'failing' },
        },
      ])
      return webhook
    })
    if (disabled)
      this.#options.log?.warn(
        { webhookId: disabled.id, projectId: disabled.projectId, reason: disabled.disabledReason },
        'webhook disabled after repeated failures',
      )
  }

  /** Pokes when a retry falls due (the earliest one armed; the rest re-armed as each fires). */
  #wakeAt(at: number): void {
    if (this.#closed) return
    this.#retries.push(at)
    this.#armRetry()
  }

  #armRetry(): void {
    const now = Date.now()
    this.#retries = this.#retries.filter((at) => at > now)
    const next = Math.min(...this.#retries)
    if (!Number.isFinite(next) || (this.#retryTimer && this.#retryTimer.at <= next)) return
    if (this.#retryTimer) clearTimeout(this.#retryTimer.timer)
    const timer = setTimeout(() => {
      this.#retryTimer = null
      this.poke()
      this.#armRetry()
    }, next - now)
    timer.unref()
    this.#retryTimer = { at: next, timer }
  }
}
