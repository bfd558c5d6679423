import { readdirSync, readFileSync, readlinkSync } from 'node:fs'
import { summarize, type Summary } from '../../bench/agent/stats.js'
import { http } from '../helpers/cli-process.js'
import type { TestEngine } from '../helpers/engines.js'
import { openSse, type SseConnection } from '../helpers/sse-client.js'
import { startLoadServer } from './load-server.js'

// Load and soak (docs/guides/reliability.md, R5): a real `plinth serve` process under load (concurrent runs
// against an instant upstream in the real OpenAI wire format, with SSE subscribers watching), then
// steady mixed traffic for a while, its memory and file descriptors sampled from /proc.

export interface LoadSoakOptions {
  engine: TestEngine
  concurrentRuns: number
  roundsPerRun: number
  subscribers: number
  soakMs: number
  sampleEveryMs: number
  log?: (line: string) => void
}

export interface LoadSoakReport {
  engine: TestEngine
  load: {
    runs: number
    rounds: number
    errors: number
    /** Runs refused 503 overloaded (retried after Retry-After): shed, not failed. */
    shed: number
    round: Summary
    wallMs: number
    subscribers: number
    eventsSeen: number
  }
  soak: {
    durationMs: number
    operations: Record<string, number>
    errors: string[]
    samples: Array<{ atMs: number; rssMb: number; fds: number; sockets: number }>
    /** MB per minute over the samples after the first fifth (warm-up). */
    rssSlopeMbPerMin: number
    /** Before any load, after one of each operation. */
    fdsBaseline: number
    socketsBaseline: number
    socketsEnd: number
    rssBaselineMb: number
    fdsStart: number
    fdsEnd: number
    rssStartMb: number
    rssEndMb: number
  }
}

/** RSS and open descriptors; `sockets` of them are sockets (database pool, clients' keep-alive connections). */
function processStats(pid: number): { rssMb: number; fds: number; sockets: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0)
  const fds = readdirSync(`/proc/${pid}/fd`)
  const sockets = fds.filter((fd) => {
    try {
      return readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:')
    } catch {
      return false
    }
  }).length
  return { rssMb: rssKb / 1024, fds: fds.length, sockets }
}

/** Least-squares slope of y over x. */
function slope(points: Array<[number, number]>): number {
  if (points.length < 2) return 0
  const n = points.length
  const mx = points.reduce((sum, [x]) => sum + x, 0) / n
  const my = points.reduce((sum, [, y]) => sum + y, 0) / n
  const num = points.reduce((sum, [x, y]) => sum + (x - mx) * (y - my), 0)
  const den = points.reduce((sum, [x]) => sum + (x - mx) ** 2, 0)
  return den === 0 ? 0 : num / den
}

export async function runLoadSoak(options: LoadSoakOptions): Promise<LoadSoakReport> {
  const log = options.log ?? (() => {})
  const streams: SseConnection[] = []
  // Shedding on, as shipped: a run refused as overload is retried after Retry-After, not an error.
  const load = await startLoadServer({
    engine: options.engine,
    name: 'soak',
    env: {
      PLINTH_OVERLOAD_LOOP_DELAY_MS: '2000',
      PLINTH_OVERLOAD_DB_WAIT_MS: '1000',
      PLINTH_OVERLOAD_MAX_ACTIVE_RUNS: '256',
      PLINTH_OVERLOAD_ADAPTIVE_CAP_SECONDS: '2',
      PLINTH_OVERLOAD_RETRY_AFTER: '1',
    },
  })
  const { server, token, upstream } = load
  try {
    const url = server.url
    const project = (await http(url, 'POST', '/api/projects', { token, body: { name: 'soak' } })).body.id as string
    // The baseline: after one of each operation (pool connections, caches and modules in place), before any load.
    const warm = (await http(url, 'POST', `/api/projects/${project}/conversations`, { token, body: {} })).body
      .id as string
    await http(url, 'POST', `/api/conversations/${warm}/runs?wait=true`, { token, body: { input: 'weather?' } })
    await http(url, 'POST', '/api/commands/rdm.ping', {
      token,
      body: { entrance: 'button', projectId: project, params: { target: 'warm' } },
    })
    await new Promise((resolve) => setTimeout(resolve, 1000))
    const baseline = processStats(server.pid)

    // --- load: concurrent runs × rounds, with subscribers on the project stream ---------------------
    for (let index = 0; index < options.subscribers; index++)
      streams.push(await openSse(`${url}/api/projects/${project}/events`, { token }))
    const conversations = await Promise.all(
      Array.from(
        { length: options.concurrentRuns },
        async () =>
          (await http(url, 'POST', `/api/projects/${project}/conversations`, { token, body: {} })).body.id as string,
      ),
    )
    const rounds: number[] = []
    let loadErrors = 0
    let shed = 0
    const loadStarted = performance.now()
    await Promise.all(
      conversations.map(async (conversation) => {
        for (let round = 0; round < options.roundsPerRun; round++) {
          let started = performance.now()
          let answer = await http(url, 'POST', `/api/conversations/${conversation}/runs?wait=true`, {
            token,
            body: { input: 'weather in Paris?' },
          }).catch(() => null)
          while (answer?.status === 503 && answer.body?.code === 'overloaded') {
            shed++
            await new Promise((resolve) => setTimeout(resolve, 1000))
            started = performance.now()
            answer = await http(url, 'POST', `/api/conversations/${conversation}/runs?wait=true`, {
              token,
              body: { input: 'weather in Paris?' },
            }).catch(() => null)
          }
          if (answer?.status !== 201 || answer.body.status !== 'completed') {
            loadErrors++
            continue
          }
          rounds.push(performance.now() - started)
        }
      }),
    )
    const loadWallMs = performance.now() - loadStarted
    await new Promise((resolve) => setTimeout(resolve, 500))
    const eventsSeen = streams.reduce((sum, stream) => sum + stream.events.length, 0)
    for (const stream of streams.splice(0)) stream.close()
    log(
      `[soak] load: ${rounds.length}/${options.concurrentRuns * options.roundsPerRun} rounds in ${Math.round(loadWallMs)} ms, ${loadErrors} errors, ${shed} refused as overload (retried), ${eventsSeen} events to ${options.subscribers} subscribers`,
    )

    // --- soak: steady mixed traffic, memory and descriptors sampled ---------------------------------
    const pid = server.pid
    await new Promise((resolve) => setTimeout(resolve, 1000))
    const start = processStats(pid)
    const samples: LoadSoakReport['soak']['samples'] = [{ atMs: 0, ...start }]
    const operations: Record<string, number> = { run: 0, dispatch: 0, decision: 0, reconnect: 0 }
    const errors: string[] = []
    const soakStarted = Date.now()
    const sampler = setInterval(
      () => samples.push({ atMs: Date.now() - soakStarted, ...processStats(pid) }),
      options.sampleEveryMs,
    )
    const soakConversation = (await http(url, 'POST', `/api/projects/${project}/conversations`, { token, body: {} }))
      .body.id as string
    const note = (what: string, problem: string): void => {
      if (errors.length < 50) errors.push(`${what}: ${problem}`)
    }
    let lastEventId = '0'
    const workers = [
      // Runs, each in a conversation of its own (one active run per conversation).
      async () => {
        const conversation = (await http(url, 'POST', `/api/projects/${project}/conversations`, { token, body: {} }))
          .body.id as string
        const answer = await http(url, 'POST', `/api/conversations/${conversation}/runs?wait=true`, {
          token,
          body: { input: 'weather?' },
        })
        if (answer.status !== 201 || answer.body.status !== 'completed')
          note('run', `${answer.status} ${answer.body.status ?? answer.body.code}`)
        operations.run!++
      },
      // An audited no-op dispatch from a button.
      async () => {
        const answer = await http(url, 'POST', '/api/commands/rdm.ping', {
          token,
          body: { entrance: 'button', projectId: project, params: { target: 'soak' } },
        })
        if (answer.status !== 200) note('dispatch', `${answer.status} ${answer.body.code}`)
        operations.dispatch!++
      },
      // A command that asks, answered by a person.
      async () => {
        const asked = await http(url, 'POST', '/api/commands/rdm.draft.compose', {
          token,
          body: { entrance: 'button', conversationId: soakConversation, params: { title: 'soak', body: 'x' } },
        })
        if (asked.status !== 202) return note('decision', `asked: ${asked.status} ${asked.body.code}`)
        const answered = await http(url, 'POST', `/api/decisions/${asked.body.decision.id}`, {
          token,
          body: { decision: 'approve' },
        })
        if (answered.status !== 200) note('decision', `answered: ${answered.status} ${answered.body.code}`)
        operations.decision!++
      },
      // A client that reconnects to the project stream from its last event id.
      async () => {
        const stream = await openSse(`${url}/api/projects/${project}/events`, { token, lastEventId })
        if (stream.status !== 200) note('reconnect', `status ${stream.status}`)
        await new Promise((resolve) => setTimeout(resolve, 200))
        lastEventId = stream.events.at(-1)?.id ?? lastEventId
        stream.close()
        operations.reconnect!++
      },
    ]
    await Promise.all(
      workers.map(async (work) => {
        while (Date.now() - soakStarted < options.soakMs) {
          await work().catch((error: unknown) => note('request', String(error)))
        }
      }),
    )
    clearInterval(sampler)
    // The client's idle keep-alive connections are the client's, not the server's: close them (fetch's
    // global dispatcher, registered under undici's documented symbol), then let the server see it.
    // A fresh one of the same class takes its place: later test files in this worker fetch too.
    const globalDispatcher = Symbol.for('undici.globalDispatcher.1')
    const globals = globalThis as unknown as Record<symbol, { close?: () => Promise<void> } | undefined>
    const dispatcher = globals[globalDispatcher]
    await dispatcher?.close?.()
    if (dispatcher) globals[globalDispatcher] = new (dispatcher.constructor as new () => typeof dispatcher)()
    // Likewise the server's idle keep-alive connections to the upstream, which grow with concurrency
    // and which a real upstream closes after its keep-alive timeout: the fake closes them now.
    upstream.server.closeIdleConnections()
    await new Promise((resolve) => setTimeout(resolve, 3000))
    const end = processStats(pid)
    samples.push({ atMs: Date.now() - soakStarted, ...end })
    const steady = samples.filter((sample) => sample.atMs >= options.soakMs / 5)
    const report: LoadSoakReport = {
      engine: options.engine,
      load: {
        runs: options.concurrentRuns,
        rounds: options.concurrentRuns * options.roundsPerRun,
        errors: loadErrors,
        shed,
        round: summarize(rounds),
        wallMs: loadWallMs,
        subscribers: options.subscribers,
        eventsSeen,
      },
      soak: {
        durationMs: Date.now() - soakStarted,
        operations,
        errors,
        samples,
        rssSlopeMbPerMin: slope(steady.map((sample) => [sample.atMs / 60_000, sample.rssMb])),
        fdsBaseline: baseline.fds,
        socketsBaseline: baseline.sockets,
        socketsEnd: end.sockets,
        rssBaselineMb: baseline.rssMb,
        fdsStart: start.fds,
        fdsEnd: end.fds,
        rssStartMb: start.rssMb,
        rssEndMb: end.rssMb,
      },
    }
    if (server.child.exitCode !== null) report.soak.errors.push(`the server exited (${server.child.exitCode})`)
    return report
  } finally {
    for (const stream of streams) stream.close()
    await load.close()
  }
}
