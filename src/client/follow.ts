import { PlinthError } from './errors.js'
import { controlEvents, terminalRunEvents, type PlinthEvent, type StreamState, type StreamStateInfo } from './events.js'
import { sseFrames } from './sse-frames.js'
import type { Transport } from './transport.js'

export interface StreamOptions {
  /** Resume after this event id (one kept from an earlier stream); default: from the start. */
  after?: string | number | null
  /** Aborting ends the iteration (the connection is closed). */
  signal?: AbortSignal
  /** Each connect and reconnect, and when the stream is live again (for a status line). */
  onState?: (state: StreamState, info: StreamStateInfo) => void
}

export interface FollowPlan {
  /** The GET stream to (re)open; null while it is not known yet (a run being created). */
  path: () => string | null
  /**
   * While `path` is null: the request that opens the stream itself (POST …/runs with Accept:
   * text/event-stream and an Idempotency-Key, so asking again never starts a second run).
   */
  first?: (signal: AbortSignal) => Promise<Response>
  /** End after a run's terminal event (run streams), instead of following for ever. */
  untilRunEnds: boolean
  /** Sees each event before the caller does (a run stream learns its run id here). */
  onEvent?: (event: PlinthEvent) => void
}

/** Statuses worth another try: the server is busy, restarting or behind a proxy that timed out. */
function retryable(error: unknown): boolean {
  return (
    error instanceof PlinthError &&
    (error.status === 0 || error.status === 408 || error.status === 429 || error.status >= 500)
  )
}

/**
 * The first POST creates a run: only a lost connection or a gateway/restart answer is asked again.
 * A 429 (too many runs) or a 500 is the answer to give the caller, not to repeat.
 */
function retryableCreate(error: unknown): boolean {
  return (
    error instanceof PlinthError &&
    (error.status === 0 || error.status === 502 || error.status === 503 || error.status === 504)
  )
}

/** A connection that stayed up this long (or gave an event) was a good one: backoff starts over. */
const healthyAfterMs = 5000

/** Event ids are decimal integers (bigint in the log): compared as such, not as strings. */
function after(id: string, last: string | null): boolean {
  if (last === null) return true
  return id.length !== last.length ? id.length > last.length : id > last
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer)
      signal.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal.addEventListener('abort', done, { once: true })
  })
}

/**
 * Follows an event stream as an async iterator: each event once, in order, across reconnects. A
 * dropped connection, a server restart (`shutdown`), the stream's lifetime (`reconnect`) or a 429/5xx
 * reconnect with the last event id after a backoff with jitter; `access_revoked`, 401/403/404 and other
 * client errors end the iteration with a PlinthError.
 */
export async function* follow(
  transport: Transport,
  plan: FollowPlan,
  options: StreamOptions = {},
): AsyncGenerator<PlinthEvent, void, undefined> {
  const { initialDelayMs, maxDelayMs, maxAttempts } = transport.reconnect
  const controller = new AbortController()
  const abort = (): void => controller.abort()
  if (options.signal?.aborted) return
  options.signal?.addEventListener('abort', abort, { once: true })
  let lastEventId = options.after === undefined || options.after === null ? null : String(options.after)
  let attempt = 0
  let delayMs = 0
  let lost: unknown
  try {
    for (;;) {
      options.onState?.(attempt === 0 ? 'connecting' : 'reconnecting', {
        attempt,
        delayMs,
        lastEventId,
        ...(attempt > 0 && { error: lost }),
      })
      if (delayMs > 0) await sleep(delayMs, controller.signal)
      if (controller.signal.aborted) return
      const path = plan.path()
      const creating = path === null
      // undefined: this attempt failed; null: the server says there is nothing more (204).
      let response: Response | null | undefined
      try {
        if (path !== null) response = await transport.openStream(path, lastEventId, controller.signal)
        else if (plan.first) response = await plan.first(controller.signal)
        else throw new PlinthError(0, 'invalid_stream', 'the stream has no path to follow')
      } catch (error) {
        if (controller.signal.aborted) return
        if (!(creating ? retryableCreate(error) : retryable(error))) throw error
        lost = error
      }
      if (response === null) return
      let healthy = false
      let restartAtOnce = false
      if (response !== undefined) {
        const openedAt = Date.now()
        options.onState?.('live', { attempt, delayMs: 0, lastEventId })
        try {
          for await (const frame of sseFrames(
            response.body as ReadableStream<Uint8Array>,
            transport.baseUrl || 'the server',
          )) {
            if (controlEvents.has(frame.event)) {
              if (frame.event === 'access_revoked')
                throw new PlinthError(
                  403,
                  'access_revoked',
                  'access to this stream was revoked (token, user or project access)',
                )
              // `reconnect` (the stream's lifetime) comes back at once; `shutdown` after a backoff.
              lost = new PlinthError(503, frame.event, `the server ended the stream (${frame.event})`)
              restartAtOnce = frame.event === 'reconnect'
              break
            }
            healthy = true
            if (frame.id !== null) {
              if (!after(frame.id, lastEventId)) continue
              lastEventId = frame.id
            }
            let data: unknown = null
            try {
              data = JSON.parse(frame.data)
            } catch {
              continue
            }
            const event = { event: frame.event, id: frame.id ?? '', data } as PlinthEvent
            plan.onEvent?.(event)
            // Frames already read with an aborted one are not handed out.
            if (controller.signal.aborted) return
            yield event
            if (plan.untilRunEnds && terminalRunEvents.has(frame.event)) return
          }
        } catch (error) {
          if (controller.signal.aborted) return
          if (!retryable(error)) throw error
          lost = error
        }
        healthy ||= Date.now() - openedAt >= healthyAfterMs
      }
      if (controller.signal.aborted) return
      attempt = healthy ? 1 : attempt + 1
      if (attempt > maxAttempts) throw lost ?? new PlinthError(0, 'unreachable', 'the stream kept dropping')
      delayMs =
        restartAtOnce && healthy
          ? 0
          : Math.min(maxDelayMs, initialDelayMs * 2 ** (attempt - 1)) * (0.75 + Math.random() / 2)
    }
  } finally {
    options.signal?.removeEventListener('abort', abort)
    controller.abort()
  }
}
