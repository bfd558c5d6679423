import type { FastifyReply, FastifyRequest } from 'fastify'
import { streamEvents, type EventRecord, type EventScope, type Store } from '../store/index.js'
import { HttpProblem } from './problem.js'

export interface StreamContext {
  store: Store
  /** Aborted when the server shuts down: streams end with a final `shutdown` event. */
  shutdown: AbortSignal
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
 * Streams a scope of the event log over SSE: `id:` is the event id, `event:` its type, `data:` its
 * JSON. Replays what the client missed from the table, then follows live events until the client
 * leaves or the server shuts down. Call only after authorization (errors before the first write
 * are still ordinary problem+json answers).
 */
export async function serveEventStream(
  request: FastifyRequest,
  reply: FastifyReply,
  context: StreamContext,
  scope: EventScope,
  filter?: (event: EventRecord) => boolean,
  /** Ends the stream after the event for which this returns true (a run's terminal event). */
  until?: (event: EventRecord) => boolean,
): Promise<void> {
  const sse = reply.sse
  const afterId = resumePoint(request)
  const finished = new AbortController()
  const onShutdown = (): void => finished.abort()
  context.shutdown.addEventListener('abort', onShutdown)
  sse.keepAlive()
  sse.onClose(() => finished.abort())
  reply.header('cache-control', 'no-cache').header('x-accel-buffering', 'no')
  sse.sendHeaders()
  try {
    for await (const event of streamEvents(context.store.db, context.store.feed, scope, {
      afterId,
      signal: finished.signal,
      ...(filter && { filter }),
    })) {
      if (!sse.isConnected) break
      await sse.send({ id: String(event.id), event: event.type, data: event.data })
      if (until?.(event)) break
    }
    if (context.shutdown.aborted && sse.isConnected) {
      await sse.send({ event: 'shutdown', data: { reason: 'server shutting down; reconnect with Last-Event-ID' } })
    }
  } catch (error) {
    request.log.warn({ err: error }, 'event stream ended with an error')
  } finally {
    context.shutdown.removeEventListener('abort', onShutdown)
    if (sse.isConnected) sse.close()
  }
}
