/**
 * SSE fan-out: `subscribers` clients on `GET /api/conversations/:id/events` (each live once its
 * replayed `conversation.created` arrived), then one run in that conversation. Per delivery of a run
 * event, lag = when this subscriber got it − when the first subscriber got it. Connections go through
 * `node:http` without an agent, so no client pool limits how many are open.
 */
import { setMaxListeners } from 'node:events'
import { request, type ClientRequest } from 'node:http'
import { performance } from 'node:perf_hooks'
import { createParser } from 'eventsource-parser'
import type { PlinthTarget } from './agent-round.js'
import { roundInput } from './agent-round.js'
import { summarize, type Summary } from './stats.js'

export interface FanOutResult {
  subscribers: number
  /** Opening every stream until each had its replay. */
  connectMs: number
  /** Run events each subscriber should get (the first subscriber's count). */
  eventsPerSubscriber: number
  deltasPerSubscriber: number
  /** Deliveries missing or out of order, over all subscribers. */
  missing: number
  lag: Summary
  /** POST → first subscriber saw run.completed; POST → the last one did. */
  firstCompletedMs: number
  allCompletedMs: number
}

interface Subscriber {
  request: ClientRequest
  /** event id → receive time. */
  received: Map<number, number>
  completed: Promise<void>
}

const connectBatch = 50

/** `connectTimeoutMs` bounds opening the streams; `timeoutMs` the run from its POST until every subscriber saw its end. */
export async function measureFanOut(
  target: PlinthTarget,
  conversationId: string,
  options: { subscribers: number; model: string; connectTimeoutMs: number; timeoutMs: number },
): Promise<FanOutResult> {
  const subscribers: Subscriber[] = []
  const connectDeadline = AbortSignal.timeout(options.connectTimeoutMs)
  // Every stream listens to it: one listener per subscriber is expected, not a leak.
  setMaxListeners(0, connectDeadline)
  const types = new Map<number, string>()
  try {
    const connectStarted = performance.now()
    for (let index = 0; index < options.subscribers; index += connectBatch) {
      const batch = Array.from({ length: Math.min(connectBatch, options.subscribers - index) }, () =>
        subscribe(target, conversationId, types, connectDeadline),
      )
      const settled = await Promise.allSettled(batch)
      for (const outcome of settled) if (outcome.status === 'fulfilled') subscribers.push(outcome.value)
      const failed = settled.find((outcome) => outcome.status === 'rejected')
      if (failed) throw failed.reason
    }
    const connectMs = performance.now() - connectStarted

    const deadline = AbortSignal.timeout(options.timeoutMs)
    const posted = performance.now()
    const response = await fetch(`${target.url}/api/conversations/${conversationId}/runs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${target.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input: roundInput, model: options.model }),
      signal: deadline,
    })
    if (response.status !== 201)
      throw new Error(`fan-out: POST /runs answered ${response.status}: ${(await response.text()).slice(0, 300)}`)
    await response.arrayBuffer()
    await Promise.race([
      Promise.all(subscribers.map((subscriber) => subscriber.completed)),
      new Promise((_, reject) =>
        deadline.addEventListener(
          'abort',
          () => reject(new Error(`fan-out: not every subscriber saw run.completed within ${options.timeoutMs} ms`)),
          { once: true },
        ),
      ),
    ])

    const ids = [...types.keys()].sort((a, b) => a - b)
    if (ids.some((id) => types.get(id) === 'run.failed')) throw new Error('fan-out: the run failed')
    // The first receipt of each event is the reference for its other deliveries.
    const first = new Map(
      ids.map((id) => [
        id,
        Math.min(...subscribers.map((subscriber) => subscriber.received.get(id) ?? Number.POSITIVE_INFINITY)),
      ]),
    )
    const lags: number[] = []
    let missing = 0
    for (const subscriber of subscribers) {
      for (const id of ids) {
        const at = subscriber.received.get(id)
        if (at === undefined) missing++
        else lags.push(at - (first.get(id) ?? at))
      }
    }
    const completedId = ids.find((id) => types.get(id) === 'run.completed')
    const completions = subscribers.map((subscriber) =>
      completedId === undefined ? Number.NaN : (subscriber.received.get(completedId) ?? Number.NaN),
    )
    return {
      subscribers: subscribers.length,
      connectMs,
      eventsPerSubscriber: ids.length,
      deltasPerSubscriber: ids.filter((id) => types.get(id) === 'message.delta').length,
      missing,
      lag: summarize(lags),
      firstCompletedMs: Math.min(...completions) - posted,
      allCompletedMs: Math.max(...completions) - posted,
    }
  } finally {
    for (const subscriber of subscribers) subscriber.request.destroy()
  }
}

/** Opens one stream; resolves once its replay (conversation.created) has arrived. */
function subscribe(
  target: PlinthTarget,
  conversationId: string,
  types: Map<number, string>,
  connectDeadline: AbortSignal,
): Promise<Subscriber> {
  return new Promise((resolve, reject) => {
    const received = new Map<number, number>()
    let live = false
    let onCompleted: () => void = () => undefined
    const completed = new Promise<void>((done) => (onCompleted = done))
    const parser = createParser({
      onEvent: (event) => {
        const now = performance.now()
        if (!live) {
          // The replay: the conversation's creation. From here on, the stream is live.
          live = true
          connectDeadline.removeEventListener('abort', onTimeout)
          resolve({ request: outgoing, received, completed })
          return
        }
        const id = Number(event.id)
        received.set(id, now)
        if (!types.has(id)) types.set(id, event.event ?? 'message')
        if (event.event === 'run.completed' || event.event === 'run.failed') onCompleted()
      },
    })
    const outgoing = request(`${target.url}/api/conversations/${conversationId}/events`, {
      agent: false,
      headers: { authorization: `Bearer ${target.token}`, accept: 'text/event-stream' },
    })
    const onTimeout = (): void => {
      outgoing.destroy()
      reject(new Error('fan-out: could not open every stream in time'))
    }
    connectDeadline.addEventListener('abort', onTimeout, { once: true })
    outgoing.on('response', (response) => {
      if (response.statusCode !== 200) {
        reject(new Error(`fan-out: GET /events answered ${response.statusCode}`))
        response.resume()
        return
      }
      response.setEncoding('utf8')
      response.on('data', (text: string) => parser.feed(text))
    })
    outgoing.on('error', (error) => {
      if (!live) reject(error)
    })
    outgoing.end()
  })
}
