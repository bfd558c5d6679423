import type { FastifyReply, FastifyRequest } from 'fastify'
import { highestEventId, streamEvents, type EventRecord, type EventScope, type Store } from '../store/index.js'
import { HttpProblem } from './problem.js'
import { controlFrame, eventFrame, SseWriter } from './sse-writer.js'
import type { StreamAccess, StreamEndReason, StreamHandle, StreamRegistry } from './stream-registry.js'

export interface StreamContext {
  store: Store
  streams: StreamRegistry
  /** Aborted when the server shuts down: streams end with a final `shutdown` event. */
  shutdown: AbortSignal
}

export interface StreamOptions {
  scope: EventScope
  /** Who reads and how to ask again whether they still may (see StreamRegistry). */
  access: Omit<StreamAccess, 'userId' | 'tokenId'>
  /** A slot the route took before doing anything (so a 429 comes first); released here. */
  handle?: StreamHandle
  /** Drops events the reader may not see (applied to replayed and live events alike). */
  filter?: (event: EventRecord) => boolean
  /** Ends the stream after the event for which this returns (or resolves to) true (a run's terminal event). */
  until?: (event: EventRecord) => boolean | Promise<boolean>
}

/** The id to resume after: `Last-Event-ID` wins over `?after=`; both must be non-negative integers. */
export function resumePoint(request: FastifyRequest): number {
  const header = request.headers['last-event-id']
  const raw = (Array.isArray(header) ? header[0] : header) ?? (request.query as { after?: string } | undefined)?.after
  if (raw === undefined || raw === '') return 0
  if (!/^\d{1,15}$/.test(raw.trim())) {
    throw new HttpProblem('invalid_last_event_id', 'Last-Event-ID and ?after= must be a non-negative integer event id')
  }
  return Number(raw.trim())
}

/**
 * `resumePoint`, refused (400 `invalid_last_event_id`) past the newest event of the log: an id this log
 * never gave (another server's, a restored database's) would wait for ever in silence, or pass for
 * "nothing more" on a finished run.
 */
export async function checkedResumePoint(request: FastifyRequest, store: Store): Promise<number> {
  const afterId = resumePoint(request)
  if (afterId > 0 && afterId > (await highestEventId(store)))
    throw new HttpProblem(
      'invalid_last_event_id',
      `event ${afterId} is past the newest event of this server's log: resume with an id it sent (or none, to replay from the start)`,
    )
  return afterId
}

/** How long the final frame of a stream may take to reach a client before it is dropped. */
const finalFrameTimeoutMs = 2000

/**
 * Streams a scope of the event log over SSE: `id:` is the event id, `event:` its type, `data:` its
 * JSON. Replays what the client missed from the table, then follows live events until the client
 * leaves, the run ends (`until`), or the server ends the stream: `access_revoked` when the token,
 * the user or their access to the resource is gone; `reconnect` at the maximum lifetime (resume
 * with Last-Event-ID); `shutdown`. Call only after authorization: the caps (429
 * `too_many_streams`) and other errors before the first write are ordinary problem+json answers.
 */
export async function serveEventStream(
  request: FastifyRequest,
  reply: FastifyReply,
  context: StreamContext,
  options: StreamOptions,
): Promise<void> {
  if (!request.user || !request.tokenId) throw new HttpProblem('unauthorized')
  const afterId = await checkedResumePoint(request, context.store)
  const handle =
    options.handle ??
    context.streams.open(
      { ...options.access, userId: request.user.id, tokenId: request.tokenId },
      Date.now() - reply.elapsedTime,
    )
  const writer = new SseWriter(reply.raw, context.streams.limits.drainTimeoutMs)
  const finished = new AbortController()
  const stop = (): void => finished.abort()
  context.shutdown.addEventListener('abort', stop)
  handle.signal.addEventListener('abort', stop)
  reply.raw.once('close', stop)
  let lastId = afterId
  try {
    reply.sse.keepAlive()
    reply.header('cache-control', 'no-cache').header('x-accel-buffering', 'no')
    reply.sse.sendHeaders()
    writer.sendHeadersSoon()
    for await (const event of streamEvents(context.store, context.store.feed, options.scope, {
      afterId,
      signal: finished.signal,
      maxQueuedBytes: context.streams.limits.maxQueuedBytes,
      ...(options.filter && { filter: options.filter }),
    })) {
      const outcome = await writer.write(eventFrame(event), finished.signal)
      if (outcome === 'stalled') context.streams.countDropped()
      if (outcome !== 'written') break
      lastId = event.id
      const ends = options.until?.(event)
      if (ends === true || (ends instanceof Promise && (await ends))) break
    }
    const reason: StreamEndReason | null = context.shutdown.aborted ? 'shutdown' : handle.reason
    if (reason && writer.open) await writer.write(finalFrame(reason, lastId), undefined, finalFrameTimeoutMs)
  } catch (error) {
    request.log.warn({ err: error }, 'event stream ended with an error')
  } finally {
    context.shutdown.removeEventListener('abort', stop)
    handle.signal.removeEventListener('abort', stop)
    reply.raw.off('close', stop)
    handle.release()
    writer.end()
    // Stops the heartbeat; a dropped client's socket is already gone.
    if (!reply.raw.destroyed) reply.sse.close()
  }
}

function finalFrame(reason: StreamEndReason, lastEventId: number): string {
  switch (reason) {
    case 'access_revoked':
      return controlFrame('access_revoked', {
        code: 'access_revoked',
        message: 'access to this stream was revoked (token, user or project access)',
      })
    case 'shutdown':
      return controlFrame('shutdown', { reason: 'server shutting down; reconnect with Last-Event-ID' })
    default:
      return controlFrame('reconnect', {
        reason,
        lastEventId,
        message: 'the server ended this stream; reconnect with Last-Event-ID to continue where it stopped',
      })
  }
}
