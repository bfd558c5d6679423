import type { FastifyReply, FastifyRequest } from 'fastify'
import { EventEncoder } from '@ag-ui/encoder'
import { streamEvents } from '../../store/index.js'
import type { StreamContext } from '../event-stream-route.js'
import { HttpProblem } from '../problem.js'
import { SseWriter } from '../sse-writer.js'
import type { StreamAccess, StreamEndReason } from '../stream-registry.js'
import type { AgUiEvent, AgUiEventMapper } from './event-mapper.js'

/** What an AG-UI stream follows, once its run is created (or its answers checked). */
export interface AgUiStreamPlan {
  runId: string
  /** Follow the run's log after this event id. */
  afterId: number
  mapper: AgUiEventMapper
  /** Started once the stream is open (answers to a waiting run, which may run approved commands); a failure ends it with RUN_ERROR. */
  afterOpen?: () => Promise<void>
}

/** A failure of an answer sent after the stream opened: it ends the AG-UI run with RUN_ERROR `code`. */
export class AnswerFailed extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message)
    this.name = 'AnswerFailed'
  }
}

const encoder = new EventEncoder()
/** How long the final frames may take to reach a client before it is dropped. */
const finalFrameTimeoutMs = 2000

/**
 * Serves one AG-UI run over SSE: the stream's slot is taken first (429 `too_many_streams` before
 * anything is created), then `prepare` creates the run or checks the answers — its problems are still
 * ordinary problem+json answers — then AG-UI events mapped from the run's durable log follow until
 * RUN_FINISHED or RUN_ERROR. A client that leaves does not stop the run (cancel it for that).
 */
export async function serveAgUiStream(
  request: FastifyRequest,
  reply: FastifyReply,
  context: StreamContext,
  access: Omit<StreamAccess, 'userId' | 'tokenId'>,
  prepare: () => Promise<AgUiStreamPlan>,
): Promise<void> {
  if (!request.user || !request.tokenId) throw new HttpProblem('unauthorized')
  const handle = context.streams.open(
    { ...access, userId: request.user.id, tokenId: request.tokenId },
    Date.now() - reply.elapsedTime,
  )
  let plan: AgUiStreamPlan
  try {
    plan = await prepare()
  } catch (error) {
    handle.release()
    throw error
  }
  const { mapper } = plan
  const writer = new SseWriter(reply.raw, context.streams.limits.drainTimeoutMs)
  const finished = new AbortController()
  const stop = (): void => finished.abort()
  context.shutdown.addEventListener('abort', stop)
  handle.signal.addEventListener('abort', stop)
  reply.raw.once('close', stop)
  let failure: AnswerFailed | null = null
  const send = async (events: AgUiEvent[]): Promise<boolean> => {
    for (const event of events) {
      const outcome = await writer.write(encoder.encodeSSE(event), finished.signal)
      if (outcome === 'stalled') context.streams.countDropped()
      if (outcome !== 'written') return false
    }
    return true
  }
  try {
    reply.sse.keepAlive()
    reply.code(200).header('cache-control', 'no-cache').header('x-accel-buffering', 'no')
    reply.sse.sendHeaders()
    writer.sendHeadersSoon()
    if (!(await send(mapper.start()))) return
    plan.afterOpen?.().catch((error: unknown) => {
      failure = error instanceof AnswerFailed ? error : new AnswerFailed('internal', 'answering the run failed')
      if (!(error instanceof AnswerFailed)) request.log.error({ err: error }, 'AG-UI answers failed')
      stop()
    })
    for await (const event of streamEvents(
      context.store,
      context.store.feed,
      { runId: plan.runId },
      { afterId: plan.afterId, signal: finished.signal, maxQueuedBytes: context.streams.limits.maxQueuedBytes },
    )) {
      if (!(await send(mapper.map(event)))) break
      if (mapper.done) break
    }
    if (!mapper.done && writer.open) {
      const ended = failure as AnswerFailed | null
      const reason: StreamEndReason | null = context.shutdown.aborted ? 'shutdown' : handle.reason
      const last = ended
        ? mapper.fail(ended.code, ended.message)
        : reason
          ? mapper.fail(reason, endMessage(reason, plan.runId))
          : []
      if (last.length > 0) await writer.write(encodeAll(last), undefined, finalFrameTimeoutMs)
    }
  } catch (error) {
    request.log.warn({ err: error }, 'AG-UI stream ended with an error')
  } finally {
    context.shutdown.removeEventListener('abort', stop)
    handle.signal.removeEventListener('abort', stop)
    reply.raw.off('close', stop)
    handle.release()
    writer.end()
    if (!reply.raw.destroyed) reply.sse.close()
  }
}

function encodeAll(events: AgUiEvent[]): string {
  return events.map((event) => encoder.encodeSSE(event)).join('')
}

/** Why the stream ended before the run did; the run itself goes on. */
function endMessage(reason: StreamEndReason, runId: string): string {
  const follow = `the run goes on: follow it at GET /api/runs/${runId}/events`
  switch (reason) {
    case 'access_revoked':
      return 'access to this conversation was revoked (token, user or project access)'
    case 'shutdown':
      return `the server is shutting down; ${follow}`
    default:
      return `the server ended this stream (${reason}); ${follow}`
  }
}
