/**
 * One agent round (the model calls get_weather, the command runs, the model answers) four ways on
 * the same server, each read to its terminal event:
 * - native: `POST /api/conversations/:id/runs` with `Accept: text/event-stream` (the run's SSE, the
 *   same stream as `GET /api/runs/:id/events`);
 * - native GET: `POST /api/conversations/:id/runs` (JSON) then `GET /api/runs/:id/events`;
 * - AG-UI: `POST /api/conversations/:id/ag-ui` with a RunAgentInput, read until RUN_FINISHED;
 * - UI stream: `POST /api/conversations/:id/ui-stream` with the body `useChat` sends (the user message
 *   last), read until `data: [DONE]` (AI SDK UI message stream protocol v1).
 * Each reports the round time and the time to the first text (`message.delta` /
 * TEXT_MESSAGE_CONTENT / `text-delta`).
 */
import { performance } from 'node:perf_hooks'
import type { PlinthTarget, RoundTiming } from '../agent/agent-round.js'
import { plinthRound, roundInput } from '../agent/agent-round.js'
import { answerText } from '../agent/fake-openai-upstream.js'
import { readEventStream } from '../agent/sse.js'

export type Route = 'native' | 'native GET' | 'AG-UI' | 'UI stream'

const roundTimeoutMs = 30_000
let sequence = 0

export async function round(
  route: Route,
  target: PlinthTarget,
  conversationId: string,
  options: { model?: string; checkAnswer?: boolean } = {},
): Promise<RoundTiming> {
  if (route === 'native') return plinthRound(target, conversationId, options)
  if (route === 'native GET') return nativeGetRound(target, conversationId, options)
  if (route === 'UI stream') return uiStreamRound(target, conversationId, options)
  return agUiRound(target, conversationId, options)
}

async function nativeGetRound(
  target: PlinthTarget,
  conversationId: string,
  options: { model?: string; checkAnswer?: boolean },
): Promise<RoundTiming> {
  const started = performance.now()
  const headers = { authorization: `Bearer ${target.token}`, 'content-type': 'application/json' }
  const created = await fetch(`${target.url}/api/conversations/${conversationId}/runs`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ input: roundInput, ...(options.model && { model: options.model }) }),
    signal: AbortSignal.timeout(roundTimeoutMs),
  })
  const run = (await created.json()) as { id?: string }
  if (created.status !== 201 || !run.id) throw new Error(`POST /runs answered ${created.status}`)
  const response = await fetch(`${target.url}/api/runs/${run.id}/events`, {
    headers: { authorization: headers.authorization, accept: 'text/event-stream' },
    signal: AbortSignal.timeout(roundTimeoutMs),
  })
  if (response.status !== 200) throw new Error(`GET /runs/:id/events answered ${response.status}`)
  let firstDelta: number | undefined
  let completed: number | undefined
  let answer: string | undefined
  await readEventStream(response.body, (event) => {
    const now = performance.now()
    if (event.event === 'message.delta') firstDelta ??= now
    else if (event.event === 'message.completed')
      answer = (JSON.parse(event.data) as { content?: string }).content ?? answer
    else if (event.event === 'run.completed') completed = now
  })
  if (completed === undefined || firstDelta === undefined)
    throw new Error('the run stream ended without run.completed or message.delta')
  if (options.checkAnswer !== false && answer !== answerText)
    throw new Error(`unexpected answer ${JSON.stringify(answer)}`)
  return { totalMs: completed - started, ttftMs: firstDelta - started }
}

async function agUiRound(
  target: PlinthTarget,
  conversationId: string,
  options: { model?: string; checkAnswer?: boolean },
): Promise<RoundTiming> {
  const started = performance.now()
  const response = await fetch(`${target.url}/api/conversations/${conversationId}/ag-ui`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${target.token}`,
      'content-type': 'application/json',
      accept: 'text/event-stream',
    },
    body: JSON.stringify({
      threadId: conversationId,
      runId: `bench-${++sequence}`,
      messages: [{ id: `u${sequence}`, role: 'user', content: roundInput }],
      tools: [],
      context: [],
      forwardedProps: options.model ? { plinth: { model: options.model } } : {},
    }),
    signal: AbortSignal.timeout(roundTimeoutMs),
  })
  if (response.status !== 200)
    throw new Error(`POST /ag-ui answered ${response.status}: ${(await response.text()).slice(0, 300)}`)
  let firstText: number | undefined
  let finished: number | undefined
  let failure: string | undefined
  let toolResult = false
  let text = ''
  await readEventStream(response.body, (message) => {
    const now = performance.now()
    const event = JSON.parse(message.data) as { type: string; delta?: string; outcome?: { type?: string } }
    if (event.type === 'TEXT_MESSAGE_CONTENT') {
      firstText ??= now
      text += event.delta ?? ''
    } else if (event.type === 'TOOL_CALL_RESULT') toolResult = true
    else if (event.type === 'RUN_FINISHED') {
      if (event.outcome?.type === 'success') finished = now
      else failure = message.data
    } else if (event.type === 'RUN_ERROR') failure = message.data
  })
  if (failure) throw new Error(`the AG-UI run did not finish: ${failure.slice(0, 500)}`)
  if (finished === undefined || firstText === undefined)
    throw new Error('the AG-UI stream ended without RUN_FINISHED or text')
  if (!toolResult) throw new Error('no TOOL_CALL_RESULT for get_weather')
  if (options.checkAnswer !== false && text !== answerText) throw new Error(`unexpected answer ${JSON.stringify(text)}`)
  return { totalMs: finished - started, ttftMs: firstText - started }
}

async function uiStreamRound(
  target: PlinthTarget,
  conversationId: string,
  options: { model?: string; checkAnswer?: boolean },
): Promise<RoundTiming> {
  const started = performance.now()
  const response = await fetch(`${target.url}/api/conversations/${conversationId}/ui-stream`, {
    method: 'POST',
    headers: { authorization: `Bearer ${target.token}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      id: conversationId,
      messages: [{ id: `u${++sequence}`, role: 'user', parts: [{ type: 'text', text: roundInput }] }],
      trigger: 'submit-message',
      ...(options.model && { model: options.model }),
    }),
    signal: AbortSignal.timeout(roundTimeoutMs),
  })
  if (response.status !== 200)
    throw new Error(`POST /ui-stream answered ${response.status}: ${(await response.text()).slice(0, 300)}`)
  let firstText: number | undefined
  let done: number | undefined
  let finishReason: string | undefined
  let failure: string | undefined
  let toolOutput = false
  let text = ''
  await readEventStream(response.body, (message) => {
    const now = performance.now()
    if (message.data === '[DONE]') {
      done = now
      return
    }
    const chunk = JSON.parse(message.data) as { type: string; delta?: string; toolName?: string; finishReason?: string }
    if (chunk.type === 'text-delta') {
      firstText ??= now
      text += chunk.delta ?? ''
    } else if (chunk.type === 'tool-output-available') toolOutput = true
    else if (chunk.type === 'finish') finishReason = chunk.finishReason
    else if (chunk.type === 'error' || chunk.type === 'abort' || chunk.type === 'tool-output-error')
      failure = message.data
  })
  if (failure) throw new Error(`the UI message stream failed: ${failure.slice(0, 500)}`)
  if (done === undefined || firstText === undefined)
    throw new Error('the UI message stream ended without [DONE] or a text-delta')
  if (finishReason !== 'stop') throw new Error(`the UI message stream finished ${finishReason ?? 'without finish'}`)
  if (!toolOutput) throw new Error('no tool-output-available for get_weather')
  if (options.checkAnswer !== false && text !== answerText) throw new Error(`unexpected answer ${JSON.stringify(text)}`)
  return { totalMs: done - started, ttftMs: firstText - started }
}
