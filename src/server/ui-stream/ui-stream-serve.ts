import type { FastifyReply, FastifyRequest } from 'fastify'
import { streamEvents } from '../../store/index.js'
import type { ConversationStreamAccess } from '../access.js'
import type { StreamContext } from '../event-stream-route.js'
import { HttpProblem } from '../problem.js'
import { SseWriter } from '../sse-writer.js'
import { UiChunkMapper, uiChunkFrame, type StreamEnd, type UiChunk } from './ui-chunks.js'

export interface UiStreamOptions {
  runId: string
  conversationId: string
  /** Events after this id are sent (0: the run from its start). */
  afterId: number
  end: StreamEnd
  /** Parts sent before any event (answers that end the stream at once). */
  lead?: UiChunk[]
  /** Ends at once after `lead`, with no events (the run still waits for what the client did not answer). */
  only?: boolean
  /** Client-tool calls whose outputs the client gave: their results are not sent back to it. */
  clientCalls?: ReadonlySet<string>
}

/** The header the AI SDK's transport checks (UI message stream protocol v1). */
export const uiStreamHeader = 'x-vercel-ai-ui-message-stream'

/**
 * One run as the AI SDK's UI message stream (docs/ui-stream.md): `start` (the message id is the
 * run id), the parts of its events from `afterId` — the log, then live — and `data: [DONE]` where the
 * run ends or waits for an answer. The client going away does not stop the run (stop is Plinth's
 * cancel); it resumes with GET.
 */
export async function serveUiStream(
  request: FastifyRequest,
  reply: FastifyReply,
  context: StreamContext,
  access: ConversationStreamAccess,
  prepare: () => Promise<UiStreamOptions>,
): Promise<void> {
  if (!request.user || !request.tokenId) throw new HttpProblem('unauthorized')
  // The stream's slot first: a 429 too_many_streams must come before a run is created or answered.
  const handle = context.streams.open(
    { ...access, userId: request.user.id, tokenId: request.tokenId },
    Date.now() - reply.elapsedTime,
  )
  let options: UiStreamOptions
  try {
    options = await prepare()
  } catch (error) {
    handle.release()
    throw error
  }
  const writer = new SseWriter(reply.raw, context.streams.limits.drainTimeoutMs)
  const finished = new AbortController()
  const stop = (): void => finished.abort()
  context.shutdown.addEventListener('abort', stop)
  handle.signal.addEventListener('abort', stop)
  reply.raw.once('close', stop)
  let ended = false
  try {
    reply.sse.keepAlive()
    reply.header('cache-control', 'no-cache').header('x-accel-buffering', 'no').header(uiStreamHeader, 'v1')
    reply.sse.sendHeaders()
    writer.sendHeadersSoon()
    const send = async (chunks: UiChunk[]): Promise<boolean> => {
      for (const chunk of chunks) {
        const outcome = await writer.write(uiChunkFrame(chunk), finished.signal)
        if (outcome === 'stalled') context.streams.countDropped()
        if (outcome !== 'written') return false
      }
      return true
    }
    if (
      !(await send([
        {
          type: 'start',
          messageId: options.runId,
          messageMetadata: { runId: options.runId, conversationId: options.conversationId },
        },
        ...(options.lead ?? []),
      ]))
    )
      return
    if (options.only) {
      ended = true
      return
    }
    const mapper = new UiChunkMapper(options.end, options.clientCalls)
    for await (const event of streamEvents(
      context.store,
      context.store.feed,
      { runId: options.runId },
      { afterId: options.afterId, signal: finished.signal, maxQueuedBytes: context.streams.limits.maxQueuedBytes },
    )) {
      const mapped = mapper.map(event)
      if (!(await send(mapped.chunks))) return
      if (mapped.end) {
        ended = true
        return
      }
    }
  } catch (error) {
    request.log.warn({ err: error }, 'UI message stream ended with an error')
  } finally {
    // `[DONE]` only where the run ended or waits; a stream cut short (shutdown, access gone) is resumed with GET.
    if (ended && writer.open) await writer.write('data: [DONE]\n\n', undefined, 2000)
    context.shutdown.removeEventListener('abort', stop)
    handle.signal.removeEventListener('abort', stop)
    reply.raw.off('close', stop)
    handle.release()
    writer.end()
    if (!reply.raw.destroyed) reply.sse.close()
  }
}
