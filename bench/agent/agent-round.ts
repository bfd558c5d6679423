/**
 * One agent round, two ways:
 * - through Plinth: `POST /api/conversations/:id/runs` with `Accept: text/event-stream`, read until
 *   `run.completed` (the model calls get_weather, the command runs, the model answers; all persisted);
 * - raw: the same two upstream calls with plain `fetch`, each body read to its end and its chunks
 *   parsed, the second carrying the first's tool call and the tool's constant result.
 * Both report the round time and the time to the first answer token (TTFT).
 */
import { performance } from 'node:perf_hooks'
import { answerText } from './fake-openai-upstream.js'
import { readEventStream } from './sse.js'

export interface PlinthTarget {
  url: string
  token: string
}

export interface RoundTiming {
  /** Send of the first request → the run's end (`run.completed` / the second body's end). */
  totalMs: number
  /** Send of the first request → the first text of the answer (`message.delta` / content chunk). */
  ttftMs: number
}

export const roundInput = 'What is the weather in Paris?'
const roundTimeoutMs = 30_000

/** One run through Plinth's HTTP API. Throws unless the run completed with the tool's result and the expected answer. */
export async function plinthRound(
  target: PlinthTarget,
  conversationId: string,
  options: { model?: string; checkAnswer?: boolean } = {},
): Promise<RoundTiming & { events: number; trace: Array<[string, number]> }> {
  const started = performance.now()
  const response = await fetch(`${target.url}/api/conversations/${conversationId}/runs`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${target.token}`,
      'content-type': 'application/json',
      accept: 'text/event-stream',
    },
    body: JSON.stringify({ input: roundInput, ...(options.model && { model: options.model }) }),
    signal: AbortSignal.timeout(roundTimeoutMs),
  })
  if (response.status !== 201)
    throw new Error(`POST /runs answered ${response.status}: ${(await response.text()).slice(0, 300)}`)
  let firstDelta: number | undefined
  let completed: number | undefined
  let failure: string | undefined
  let toolStatus: string | undefined
  let answer: string | undefined
  let events = 0
  const trace: Array<[string, number]> = [['response', performance.now() - started]]
  // Read to the end of the stream (the server ends it after the terminal event), so the connection is reused.
  await readEventStream(response.body, (event) => {
    const now = performance.now()
    events++
    trace.push([event.event ?? 'message', now - started])
    if (event.event === 'message.delta') firstDelta ??= now
    else if (event.event === 'tool_call.completed') toolStatus = (JSON.parse(event.data) as { status?: string }).status
    else if (event.event === 'message.completed') answer = (JSON.parse(event.data) as { content?: string }).content
    else if (event.event === 'run.completed') completed = now
    else if (event.event === 'run.failed' || event.event === 'run.cancelled' || event.event === 'run.expired')
      failure = `${event.event} ${event.data}`
  })
  if (failure) throw new Error(`the run did not complete: ${failure.slice(0, 500)}`)
  if (completed === undefined || firstDelta === undefined)
    throw new Error('the run stream ended without run.completed or message.delta')
  if (toolStatus !== 'ok') throw new Error(`the get_weather call ended ${toolStatus ?? 'without a result'}`)
  if (options.checkAnswer !== false && answer !== answerText)
    throw new Error(`unexpected answer ${JSON.stringify(answer)}`)
  return { totalMs: completed - started, ttftMs: firstDelta - started, events, trace }
}

const systemPrompt =
  'You are an agent working inside Plinth. Use the tools offered when they help; a person may have to approve some calls. Answer concisely.'
const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The current weather in a city.',
      parameters: {
        type: 'object',
        required: ['city'],
        additionalProperties: false,
        properties: { city: { type: 'string', minLength: 1, maxLength: 100 } },
      },
    },
  },
]

interface StreamedCall {
  id: string
  name: string
  arguments: string
}

/**
 * The two upstream calls of a round with plain fetch: what any client of the model pays anyway.
 * `history`: messages sent before the round's own (a long conversation's, as `rawHistory` makes them).
 */
export async function rawRound(upstreamUrl: string, model = 'm', history: object[] = []): Promise<RoundTiming> {
  const started = performance.now()
  const messages: object[] = [
    { role: 'system', content: systemPrompt },
    ...history,
    { role: 'user', content: roundInput },
  ]
  const first = await rawCall(upstreamUrl, {
    model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    tools,
  })
  const call = first.calls[0]
  if (!call || call.name !== 'get_weather' || call.arguments !== '{"city":"Paris"}')
    throw new Error(`raw: unexpected tool call ${JSON.stringify(call)}`)
  messages.push(
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } }],
    },
    { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ city: 'Paris', tempC: 21, sky: 'clear' }) },
  )
  const second = await rawCall(upstreamUrl, {
    model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    tools,
  })
  const ended = performance.now()
  if (second.firstText === undefined || !second.text.startsWith('It is 21'))
    throw new Error(`raw: unexpected answer ${JSON.stringify(second.text)}`)
  return { totalMs: ended - started, ttftMs: second.firstText - started }
}

/** `count` messages of earlier rounds (4 a round), as Plinth sends a conversation's to the model. */
export function rawHistory(count: number): object[] {
  const messages: object[] = []
  for (let round = 0; messages.length < count; round++) {
    const id = `call_${round}`
    messages.push(
      { role: 'user', content: roundInput },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
      },
      { role: 'tool', tool_call_id: id, content: JSON.stringify({ city: 'Paris', tempC: 21, sky: 'clear' }) },
      { role: 'assistant', content: answerText },
    )
  }
  return messages.slice(0, count)
}

async function rawCall(
  upstreamUrl: string,
  body: object,
): Promise<{ calls: StreamedCall[]; text: string; firstText: number | undefined }> {
  const response = await fetch(`${upstreamUrl}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(roundTimeoutMs),
  })
  if (!response.ok) throw new Error(`raw: upstream answered ${response.status}`)
  const calls: StreamedCall[] = []
  let text = ''
  let firstText: number | undefined
  await readEventStream(response.body, (event) => {
    if (event.data === '[DONE]') return
    const chunk = JSON.parse(event.data) as {
      choices?: Array<{
        delta?: {
          content?: string | null
          tool_calls?: Array<{ index: number; id?: string; function?: { name?: string; arguments?: string } }>
        }
      }>
    }
    const delta = chunk.choices?.[0]?.delta
    if (delta?.content) {
      firstText ??= performance.now()
      text += delta.content
    }
    for (const fragment of delta?.tool_calls ?? []) {
      const call = (calls[fragment.index] ??= { id: '', name: '', arguments: '' })
      if (fragment.id) call.id = fragment.id
      if (fragment.function?.name) call.name = fragment.function.name
      call.arguments += fragment.function?.arguments ?? ''
    }
  })
  return { calls, text, firstText }
}
