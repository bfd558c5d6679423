import { summarize, type Summary } from '../../bench/agent/stats.js'
import { http } from '../helpers/cli-process.js'
import type { TestEngine } from '../helpers/engines.js'
import { openSse, type SseConnection } from '../helpers/sse-client.js'
import { startLoadServer } from './load-server.js'

// Overload (docs/guides/reliability.md, R5): the harness measures what one instance completes per second
// with a fixed number of clients, then offers three times that — new runs arriving at a steady rate,
// whatever the server's state, as independent users would — with shedding on as shipped, the cap on runs
// in flight the instance sets itself included (no operator's cap tuned to this machine). Every run the
// server accepts must complete; every one it refuses must be refused at once (503 `overloaded` with
// Retry-After); no request may run into a timeout.

export interface OverloadOptions {
  engine: TestEngine
  /** Clients of the capacity measurement, each running one run after another. */
  concurrency: number
  measureMs: number
  /** How long runs arrive at three times the measured capacity. */
  overloadMs: number
  log?: (line: string) => void
}

export interface OverloadReport {
  engine: TestEngine
  /** Completed runs per second with `concurrency` clients. */
  capacity: number
  /** The lowest cap on runs in flight the instance set itself, as its refusals said (undefined: none). */
  lowestCap: number | undefined
  offered: number
  offeredPerSecond: number
  accepted: number
  refused: number
  /** Accepted runs: from the request to their end. */
  acceptedLatency: Summary
  /** The slowest answer to a run's creation, accepted or refused, ms. */
  slowestAnswerMs: number
  errors: string[]
}

const terminal = new Set(['run.completed', 'run.failed', 'run.cancelled', 'run.expired'])

export async function runOverload(options: OverloadOptions): Promise<OverloadReport> {
  const log = options.log ?? (() => {})
  const load = await startLoadServer({
    engine: options.engine,
    name: 'overload',
    // Shedding on, with the shipped thresholds and caps.
    env: {
      PLINTH_OVERLOAD_LOOP_DELAY_MS: '2000',
      PLINTH_OVERLOAD_DB_WAIT_MS: '1000',
      PLINTH_OVERLOAD_MAX_ACTIVE_RUNS: '256',
      PLINTH_OVERLOAD_ADAPTIVE_CAP_SECONDS: '2',
      PLINTH_OVERLOAD_RETRY_AFTER: '1',
    },
  })
  const { token, url } = load
  const errors: string[] = []
  const note = (problem: string): void => void (errors.length < 50 && errors.push(problem))
  try {
    const project = (await http(url, 'POST', '/api/projects', { token, body: { name: 'overload' } })).body.id as string
    const newConversation = async (): Promise<string> =>
      (await http(url, 'POST', `/api/projects/${project}/conversations`, { token, body: {} })).body.id as string

    // --- capacity: closed loop, each client one run after another -----------------------------------
    const clients = await Promise.all(Array.from({ length: options.concurrency }, newConversation))
    let completed = 0
    const measureStarted = Date.now()
    await Promise.all(
      clients.map(async (conversation) => {
        while (Date.now() - measureStarted < options.measureMs) {
          const answer = await http(url, 'POST', `/api/conversations/${conversation}/runs?wait=true`, {
            token,
            body: { input: 'weather in Paris?' },
          })
          if (answer.status === 201 && answer.body.status === 'completed') completed++
        }
      }),
    )
    const capacity = completed / ((Date.now() - measureStarted) / 1000)
    const offeredPerSecond = 3 * capacity
    log(
      `[overload] ${options.engine}: capacity ${capacity.toFixed(1)} runs/s; offering ${offeredPerSecond.toFixed(1)}/s`,
    )

    // --- overload: open loop at three times that -----------------------------------------------------
    const ended = new Map<string, string>()
    const waiting = new Map<string, () => void>()
    let stopWatching = false
    let stream: SseConnection | undefined
    // The project's stream tells each run's end; resumed from Last-Event-ID whenever the server ends it.
    const watcher = (async () => {
      let last: string | undefined
      while (!stopWatching) {
        stream = await openSse(`${url}/api/projects/${project}/events`, { token, lastEventId: last })
        let finished = false
        void stream.ended.then(() => (finished = true))
        for (let taken = 0; !stopWatching;) {
          await stream.waitFor(taken + 1, 1000).catch(() => undefined)
          for (; taken < stream.events.length; taken++) {
            const event = stream.events[taken]!
            if (event.id !== undefined) last = event.id
            const runId = (event.data as { runId?: string } | undefined)?.runId
            if (!runId || !terminal.has(event.event ?? '')) continue
            ended.set(runId, event.event!)
            waiting.get(runId)?.()
          }
          if (finished) break
        }
        stream.close()
      }
    })()
    const idle: string[] = [...clients]
    const latencies: number[] = []
    let offered = 0
    let accepted = 0
    let refused = 0
    let lowestCap: number | undefined
    let slowestAnswerMs = 0
    const inFlight: Array<Promise<void>> = []
    const arrive = async (): Promise<void> => {
      const conversation = idle.pop() ?? (await newConversation())
      const started = Date.now()
      let answer: Response
      try {
        answer = await fetch(`${url}/api/conversations/${conversation}/runs`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ input: 'weather in Paris?' }),
          signal: AbortSignal.timeout(30_000),
        })
      } catch (error) {
        note(`a run's creation got no answer: ${(error as Error).name}`)
        return
      }
      const body = (await answer.json()) as { id?: string; code?: string; detail?: string }
      slowestAnswerMs = Math.max(slowestAnswerMs, Date.now() - started)
      if (answer.status === 503 && body.code === 'overloaded') {
        refused++
        const cap = Number(/it takes (\d+) while late/.exec(body.detail ?? '')?.[1] ?? Number.NaN)
        if (cap >= 0) lowestCap = Math.min(lowestCap ?? cap, cap)
        if (!answer.headers.get('retry-after')) note('a refusal without Retry-After')
        idle.push(conversation)
        return
      }
      if (answer.status !== 201 || !body.id) return note(`a run's creation answered ${answer.status} ${body.code}`)
      accepted++
      const runId = body.id
      if (!ended.has(runId)) await new Promise<void>((resolve) => waiting.set(runId, resolve))
      waiting.delete(runId)
      if (ended.get(runId) !== 'run.completed') note(`run ${runId} ended ${ended.get(runId)}`)
      else latencies.push(Date.now() - started)
      idle.push(conversation)
    }
    const overloadStarted = Date.now()
    const intervalMs = 1000 / offeredPerSecond
    while (Date.now() - overloadStarted < options.overloadMs) {
      offered++
      inFlight.push(arrive().catch((error: Error) => note(`an arrival failed: ${error.message}`)))
      // Arrivals keep their schedule whatever the server does (sleep to the next one, not by a fixed gap).
      const next = overloadStarted + offered * intervalMs
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, next - Date.now())))
    }
    const settled = Promise.all(inFlight)
    const deadline = new Promise<'late'>((resolve) => setTimeout(() => resolve('late'), 300_000).unref())
    if ((await Promise.race([settled, deadline])) === 'late')
      note(`${waiting.size} accepted runs had not ended 300 s after the last arrival`)
    stopWatching = true
    stream?.close()
    await watcher
    const report: OverloadReport = {
      engine: options.engine,
      capacity,
      lowestCap,
      offered,
      offeredPerSecond,
      accepted,
      refused,
      acceptedLatency: summarize(latencies),
      slowestAnswerMs,
      errors,
    }
    log(
      `[overload] ${options.engine}: ${offered} offered in ${options.overloadMs / 1000} s, ${accepted} accepted, ${refused} refused, ${errors.length} errors; accepted p50 ${report.acceptedLatency.p50.toFixed(0)} ms, p99 ${report.acceptedLatency.p99.toFixed(0)} ms; slowest answer ${slowestAnswerMs} ms; the instance's lowest cap ${lowestCap ?? 'none'}`,
    )
    return report
  } finally {
    await load.close()
  }
}
