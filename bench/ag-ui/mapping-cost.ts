/**
 * What each frontend route adds per round in the server, in process and free of the machine's other
 * load, timed over many repetitions on a real round's events (read back from the server's log through
 * GET /api/runs/:id/events):
 * - AG-UI: checking the RunAgentInput (@ag-ui/core's validator), mapping the events and encoding them
 *   with @ag-ui/encoder;
 * - UI stream: reading the `useChat` request (the route's own check; Fastify's schema check of the
 *   body is not included), mapping the events to UI message parts and framing them.
 * (Imports the routes' own modules: this measures them, nothing else.)
 */
import { performance } from 'node:perf_hooks'
import { EventEncoder } from '@ag-ui/encoder'
import type { PlinthTarget } from '../agent/agent-round.js'
import { readEventStream } from '../agent/sse.js'
import { AgUiEventMapper } from '../../src/server/ag-ui/event-mapper.js'
import { parseRunAgentInput } from '../../src/server/ag-ui/input.js'
import { UiChunkMapper, uiChunkFrame } from '../../src/server/ui-stream/ui-chunks.js'
import { readUiRequest } from '../../src/server/ui-stream/ui-request.js'
import type { EventRecord } from '../../src/store/index.js'

export interface MappingCost {
  events: number
  agUiEvents: number
  /** Microseconds per round: input check, mapping + encoding. */
  inputUs: number
  mapEncodeUs: number
  /** The same for the UI message stream: parts sent (with `start`, without `[DONE]`). */
  uiChunks: number
  uiInputUs: number
  uiMapEncodeUs: number
}

/** The events of run `runId` as the log holds them. */
async function runEvents(target: PlinthTarget, runId: string): Promise<EventRecord[]> {
  const response = await fetch(`${target.url}/api/runs/${runId}/events`, {
    headers: { authorization: `Bearer ${target.token}`, accept: 'text/event-stream' },
  })
  const events: EventRecord[] = []
  await readEventStream(response.body, (message) => {
    if (!message.id || !message.event) return
    events.push({
      id: Number(message.id),
      type: message.event,
      projectId: null,
      conversationId: null,
      runId,
      userId: null,
      data: JSON.parse(message.data) as EventRecord['data'],
      createdAt: '',
    })
  })
  return events
}

/** Microseconds per call of `work`, after a warm-up for the JIT. */
function timeUs(work: () => void, repetitions: number): number {
  for (let index = 0; index < Math.min(500, repetitions); index++) work()
  const started = performance.now()
  for (let index = 0; index < repetitions; index++) work()
  return ((performance.now() - started) * 1000) / repetitions
}

export async function measureMappingCost(
  target: PlinthTarget,
  runId: string,
  conversationId: string,
  repetitions = 5000,
): Promise<MappingCost> {
  const events = await runEvents(target, runId)
  const encoder = new EventEncoder()
  const input = {
    threadId: conversationId,
    runId: 'bench',
    messages: [{ id: 'u1', role: 'user', content: 'What is the weather in Paris?' }],
    tools: [],
    context: [],
    forwardedProps: {},
  }
  let agUiEvents = 0
  const mapAgUi = (): void => {
    const mapper = new AgUiEventMapper({ threadId: conversationId, runId: 'bench', plinthRunId: runId, model: 'm' })
    let bytes = 0
    let count = 0
    for (const event of mapper.start()) bytes += encoder.encodeSSE(event).length
    for (const record of events) {
      for (const event of mapper.map(record)) {
        bytes += encoder.encodeSSE(event).length
        count++
      }
    }
    if (!mapper.done || bytes === 0) throw new Error('the round did not map to a finished AG-UI run')
    agUiEvents = count
  }
  const uiMessages = [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'What is the weather in Paris?' }] }]
  let uiChunks = 0
  const mapUi = (): void => {
    // As the route does it: `start`, then each event's parts, to the part that ends the stream.
    let bytes = uiChunkFrame({ type: 'start', messageId: runId, messageMetadata: { runId, conversationId } }).length
    let count = 1
    const mapper = new UiChunkMapper({ waitingAt: null, liveAfter: 0 })
    let ended = false
    for (const record of events) {
      const mapped = mapper.map(record)
      for (const chunk of mapped.chunks) bytes += uiChunkFrame(chunk).length
      count += mapped.chunks.length
      if ((ended = mapped.end)) break
    }
    if (!ended || bytes === 0) throw new Error('the round did not map to a finished UI message')
    uiChunks = count
  }
  const inputUs = timeUs(() => parseRunAgentInput(input), repetitions)
  const mapEncodeUs = timeUs(mapAgUi, repetitions)
  const uiInputUs = timeUs(() => readUiRequest(uiMessages), repetitions)
  const uiMapEncodeUs = timeUs(mapUi, repetitions)
  return { events: events.length, agUiEvents, inputUs, mapEncodeUs, uiChunks, uiInputUs, uiMapEncodeUs }
}
