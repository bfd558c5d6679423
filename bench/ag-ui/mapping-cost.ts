/**
 * What the AG-UI route adds per round in the server, in process and free of the machine's other load:
 * checking the RunAgentInput (@ag-ui/core's validator), mapping a real round's events (read back from
 * the server's log through GET /api/runs/:id/events) and encoding them with @ag-ui/encoder — timed
 * over many repetitions. (Imports the route's own modules: this measures them, nothing else.)
 */
import { performance } from 'node:perf_hooks'
import { EventEncoder } from '@ag-ui/encoder'
import type { PlinthTarget } from '../agent/agent-round.js'
import { readEventStream } from '../agent/sse.js'
import { AgUiEventMapper } from '../../src/server/ag-ui/event-mapper.js'
import { parseRunAgentInput } from '../../src/server/ag-ui/input.js'
import type { EventRecord } from '../../src/store/index.js'

export interface MappingCost {
  events: number
  agUiEvents: number
  /** Microseconds per round: input check, mapping, encoding. */
  inputUs: number
  mapEncodeUs: number
}

/** The events of run `runId` as the log holds them. */
async function runEvents(target: PlinthTarget, runId: string): Promise<EventRecord[]> {
  const response = await fetch(`${target.url}/api/runs/${runId}/events`, { headers: { authorization: `Bearer ${target.token}`, accept: 'text/event-stream' } })
  const events: EventRecord[] = []
  await readEventStream(response.body, (message) => {
    if (!message.id || !message.event) return
    events.push({ id: Number(message.id), type: message.event, projectId: null, conversationId: null, runId, userId: null, data: JSON.parse(message.data) as EventRecord['data'], createdAt: '' })
  })
  return events
}

export async function measureMappingCost(target: PlinthTarget, runId: string, conversationId: string, repetitions = 5000): Promise<MappingCost> {
  const events = await runEvents(target, runId)
  const encoder = new EventEncoder()
  const input = { threadId: conversationId, runId: 'bench', messages: [{ id: 'u1', role: 'user', content: 'What is the weather in Paris?' }], tools: [], context: [], forwardedProps: {} }
  const mapRound = (): number => {
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
    return count
  }
  // Warm up the JIT, then time.
  for (let index = 0; index < 500; index++) {
    mapRound()
    parseRunAgentInput(input)
  }
  let started = performance.now()
  for (let index = 0; index < repetitions; index++) parseRunAgentInput(input)
  const inputUs = ((performance.now() - started) * 1000) / repetitions
  let agUiEvents = 0
  started = performance.now()
  for (let index = 0; index < repetitions; index++) agUiEvents = mapRound()
  const mapEncodeUs = ((performance.now() - started) * 1000) / repetitions
  return { events: events.length, agUiEvents, inputUs, mapEncodeUs }
}
