import { readFile, chmod, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { unlimitedEnv } from '../../bench/lib/unlimited-env.js'
import { lastLine, runPlinth, startServe, type ServeProcess } from '../helpers/cli-process.js'
import { CuttableProxy } from '../helpers/cuttable-proxy.js'
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.js'
import { openSse, type SseConnection } from '../helpers/sse-client.js'
import pg from 'pg'
import { countingPlugin } from './counting-plugin.js'

// Several instances under load, with failures (docs/guides/reliability.md, R6): `plinth serve` processes on
// one Postgres of the test's own (so it can be restarted), reached through a TCP proxy (so the network to it
// can stall). Clients spread their requests over the instances and move to the next one when an instance
// does not answer, as behind a load balancer. Each driver keeps one conversation busy with runs of three
// rounds (a tool, a tool behind a decision answered through another instance, an answer); subscribers
// follow the project's stream, reconnecting through random instances. Meanwhile: kill -9 of an instance,
// its restart, a Postgres restart and a 5-second network stall.

const plugin = countingPlugin('cluster', 50)
const script = {
  turnBy: 'round',
  turns: [
    { text: 'Counting.', toolCalls: [{ name: 'cluster__count', arguments: { n: 1 } }] },
    { toolCalls: [{ name: 'cluster__guarded', arguments: { n: 2 } }] },
    { text: 'All done for this message.', chunks: 5 },
  ],
}
const terminal = new Set(['run.completed', 'run.failed', 'run.cancelled', 'run.expired'])

export interface ClusterOptions {
  instances: number
  /** Concurrent clients, each keeping a conversation of its own busy with runs. */
  drivers: number
  subscribers: number
  /** Kill, restart, Postgres restart and stall during the load; without, each driver makes `runsPerDriver` runs. */
  chaos: boolean
  runsPerDriver: number
  log?: (line: string) => void
}

export interface ClusterReport {
  instances: number
  runs: number
  outcomes: Record<string, number>
  /** Completed runs per second over the load. */
  throughput: number
  wallMs: number
  /** What happened when, in seconds from the start of the load. */
  timeline: string[]
  /** Requests a client sent again elsewhere, by reason (an instance down, a 5xx during a failure). */
  retried: Record<string, number>
  subscriberEvents: number
  subscriberReconnects: number
  /** The distinct messages of the instances' error log lines (with how often each came). */
  serverErrors: string[]
  failures: string[]
}

interface Instance {
  name: string
  dataDir: string
  server: ServeProcess | null
  /** Output of the earlier processes of this instance (before a kill). */
  earlier: string
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

export async function runCluster(options: ClusterOptions): Promise<ClusterReport> {
  const log = options.log ?? (() => {})
  const cwd = await mkdtemp(join(tmpdir(), 'plinth-cluster-'))
  let postgres: PrivatePostgres | undefined
  let proxy: CuttableProxy | undefined
  const instances: Instance[] = []
  const failures: string[] = []
  const retried: Record<string, number> = {}
  const timeline: string[] = []
  const streams = new Set<SseConnection>()
  try {
    postgres = await startPrivatePostgres()
    proxy = new CuttableProxy(postgres.port)
    await proxy.listen()
    await writeFile(join(cwd, 'cluster-plugin.js'), plugin)
    await writeFile(join(cwd, 'script.json'), JSON.stringify(script))
    await writeFile(
      join(cwd, 'plinth.config.json'),
      JSON.stringify({
        plugins: ['./cluster-plugin.js'],
        models: [{ id: 'cluster', provider: 'scripted', script: 'script.json' }],
        defaultModel: 'cluster',
      }),
    )
    const databaseUrl = postgres.url.replace(`:${postgres.port}/`, `:${proxy.port}/`)
    const env = { ...unlimitedEnv, DATABASE_URL: databaseUrl, PLINTH_RUN_LEASE: '3s' }
    const token = lastLine((await runPlinth(['users', 'create', 'cluster'], { cwd, env })).stdout)
    for (let index = 0; index < options.instances; index++) {
      const dataDir = await mkdtemp(join(tmpdir(), `plinth-cluster-${index}-`))
      await chmod(dataDir, 0o711)
      instances.push({ name: `instance ${index + 1}`, dataDir, server: null, earlier: '' })
    }
    const start = async (instance: Instance): Promise<void> => {
      if (instance.server) instance.earlier += instance.server.stdout() + instance.server.stderr()
      instance.server = await startServe({ cwd, env: { ...env, PLINTH_DATA_DIR: instance.dataDir } })
    }
    await Promise.all(instances.map(start))
    const alive = (index: number): boolean => {
      const child = instances[index]?.server?.child
      return !!child && child.exitCode === null && child.signalCode === null
    }
    const count = (reason: string): void => void (retried[reason] = (retried[reason] ?? 0) + 1)

    /** A request to instance `prefer` (or the next one up), sent again elsewhere when it gets no answer or a 5xx. */
    const request = async (
      method: string,
      path: string,
      init: { prefer: number; body?: unknown; key?: string; deadlineMs?: number },
    ): Promise<{ status: number; body: Record<string, unknown>; instance: number }> => {
      const deadline = Date.now() + (init.deadlineMs ?? 120_000)
      for (let attempt = 0; ; attempt++) {
        if (Date.now() > deadline) throw new Error(`${method} ${path}: no instance answered`)
        const index = (init.prefer + attempt) % instances.length
        if (!alive(index)) {
          if (attempt % instances.length === instances.length - 1) await sleep(200)
          continue
        }
        const headers: Record<string, string> = { authorization: `Bearer ${token}` }
        if (init.body !== undefined) headers['content-type'] = 'application/json'
        if (init.key) headers['idempotency-key'] = init.key
        try {
          const response = await fetch(instances[index]!.server!.url + path, {
            method,
            headers,
            body: init.body === undefined ? undefined : JSON.stringify(init.body),
            signal: AbortSignal.timeout(60_000),
          })
          const text = await response.text()
          const body = (
            text && /json/.test(response.headers.get('content-type') ?? '') ? JSON.parse(text) : {}
          ) as Record<string, unknown>
          if (response.status >= 500) {
            count(`${response.status} ${String(body.code ?? '')}`.trim())
            await sleep(250)
            continue
          }
          return { status: response.status, body, instance: index }
        } catch (error) {
          count(`no answer (${(error as Error).name})`)
          await sleep(100)
        }
      }
    }

    const project = await request('POST', '/api/projects', { prefer: 0, body: { name: 'cluster' } })
    const projectId = project.body.id as string

    // --- subscribers: the project's stream, reconnecting through random instances ------------------
    let stopSubscribers = false
    let subscriberReconnects = 0
    const runIds = new Set<string>()
    const subscribers = Array.from({ length: options.subscribers }, (_, number) => ({
      number,
      seen: new Set<string>(),
      ended: new Set<string>(),
      duplicates: [] as string[],
      last: undefined as string | undefined,
    }))
    const watch = async (subscriber: (typeof subscribers)[number], until: () => boolean): Promise<void> => {
      while (!until()) {
        const index = Math.floor(Math.random() * instances.length)
        if (!alive(index)) {
          await sleep(50)
          continue
        }
        let stream: SseConnection
        try {
          stream = await openSse(`${instances[index]!.server!.url}/api/projects/${projectId}/events`, {
            token,
            lastEventId: subscriber.last,
          })
        } catch {
          await sleep(100)
          continue
        }
        streams.add(stream)
        subscriberReconnects++
        if (stream.status !== 200) {
          count(`subscribe ${stream.status}`)
          stream.close()
          streams.delete(stream)
          await sleep(250)
          continue
        }
        // Stays for a while (the stream ends early if its instance dies), then moves on.
        const leaveAt = Date.now() + 500 + Math.random() * 2500
        let taken = 0
        const take = (): void => {
          for (; taken < stream.events.length; taken++) {
            const event = stream.events[taken]!
            if (event.id === undefined) continue
            if (subscriber.seen.has(event.id)) subscriber.duplicates.push(`${event.id} ${event.event}`)
            subscriber.seen.add(event.id)
            subscriber.last = event.id
            const runId = (event.data as { runId?: string } | undefined)?.runId
            if (runId && terminal.has(event.event ?? '')) subscriber.ended.add(runId)
          }
        }
        let ended = false
        void stream.ended.then(() => (ended = true))
        while (Date.now() < leaveAt && !ended && !until()) {
          await stream.waitFor(taken + 1, 200).catch(() => undefined)
          take()
        }
        take()
        stream.close()
        streams.delete(stream)
      }
    }
    const subscribing = subscribers.map((subscriber) => watch(subscriber, () => stopSubscribers))

    // --- drivers: runs of three rounds, decisions answered through another instance -----------------
    let stopStarting = false
    let completedRuns = 0
    const outcomes: Record<string, number> = {}
    const conversations: Array<{ id: string; runs: string[] }> = []
    const follow = async (runId: string, createdOn: number): Promise<string> => {
      const deadline = Date.now() + 240_000
      const seenIds = new Set<string>()
      const answered = new Set<string>()
      let last: string | undefined
      let at = createdOn
      for (let attempt = 0; Date.now() < deadline; attempt++) {
        if (!alive(at)) at = (at + 1) % instances.length
        if (!alive(at)) {
          await sleep(100)
          continue
        }
        let stream: SseConnection
        try {
          stream = await openSse(`${instances[at]!.server!.url}/api/runs/${runId}/events`, { token, lastEventId: last })
        } catch {
          at = (at + 1) % instances.length
          await sleep(100)
          continue
        }
        streams.add(stream)
        try {
          if (stream.status !== 200) {
            count(`follow ${stream.status}`)
            at = (at + 1) % instances.length
            await sleep(250)
            continue
          }
          let ended = false
          void stream.ended.then(() => (ended = true))
          for (let taken = 0; ;) {
            await stream.waitFor(taken + 1, 1000).catch(() => undefined)
            for (; taken < stream.events.length; taken++) {
              const event = stream.events[taken]!
              if (event.id !== undefined) {
                if (seenIds.has(event.id)) failures.push(`run ${runId}: event ${event.id} (${event.event}) seen twice`)
                seenIds.add(event.id)
                last = event.id
              }
              if (terminal.has(event.event ?? '')) return event.event!.slice('run.'.length)
              const decisionId = (event.data as { decisionId?: string } | undefined)?.decisionId
              if (event.event === 'decision.required' && decisionId && !answered.has(decisionId)) {
                answered.add(decisionId)
                // Through another instance than the one the run was started on.
                const answer = await request('POST', `/api/decisions/${decisionId}`, {
                  prefer: createdOn + 1,
                  body: { decision: 'approve' },
                })
                if (answer.status !== 200 && answer.status !== 409)
                  failures.push(`decision ${decisionId}: ${answer.status} ${JSON.stringify(answer.body)}`)
              }
            }
            if (ended || !alive(at)) break
          }
          at = (at + 1) % instances.length
        } finally {
          stream.close()
          streams.delete(stream)
        }
      }
      return 'unfinished'
    }
    const drive = async (driver: number): Promise<void> => {
      const prefer = driver % instances.length
      const conversation = await request('POST', `/api/projects/${projectId}/conversations`, { prefer, body: {} })
      const record = { id: conversation.body.id as string, runs: [] as string[] }
      conversations.push(record)
      for (let number = 0; ; number++) {
        if (options.chaos ? stopStarting : number >= options.runsPerDriver) break
        const createdOn = (prefer + number) % instances.length
        const run = await request('POST', `/api/conversations/${record.id}/runs`, {
          prefer: createdOn,
          key: `driver-${driver}-run-${number}`,
          body: { input: `message ${number}` },
        })
        if (run.status !== 201) {
          failures.push(`driver ${driver}: starting run ${number} answered ${run.status} ${JSON.stringify(run.body)}`)
          break
        }
        const runId = run.body.id as string
        record.runs.push(runId)
        runIds.add(runId)
        const outcome = await follow(runId, run.instance)
        outcomes[outcome] = (outcomes[outcome] ?? 0) + 1
        if (outcome !== 'completed') {
          const state = await request('GET', `/api/runs/${runId}`, { prefer: 0 })
          failures.push(`run ${runId} ended ${outcome}: ${JSON.stringify(state.body.error ?? state.body.status)}`)
          break
        }
        completedRuns++
      }
    }

    const loadStarted = Date.now()
    const mark = (what: string): void => {
      const line = `${((Date.now() - loadStarted) / 1000).toFixed(1)} s: ${what} (${completedRuns} runs completed)`
      timeline.push(line)
      log(`[cluster] ${line}`)
    }
    const driving = Array.from({ length: options.drivers }, (_, driver) => drive(driver))
    if (options.chaos) {
      // Each failure lands once the cluster has made progress since the last one (chosen by progress, not by sleeping).
      const step = Math.max(3, Math.ceil(options.drivers / 3))
      const progress = async (runs: number): Promise<void> => {
        const target = completedRuns + runs
        const deadline = Date.now() + 40_000
        let nextNote = Date.now() + 10_000
        while (completedRuns < target) {
          if (Date.now() > deadline) {
            // What the database says of the runs that did not move (read directly, not through the proxy).
            const stuck = await pgQuery(
              postgres!.url,
              `select id, status, lease_owner, lease_expires_at, now() as now from runs where status not in ('completed','failed','cancelled','expired') limit 5`,
            ).catch((error: Error) => error.message)
            throw new Error(`no progress: ${completedRuns} of ${target} runs completed; ${JSON.stringify(stuck)}`)
          }
          if (Date.now() > nextNote) {
            nextNote += 10_000
            mark(`waiting for progress; retried so far ${JSON.stringify(retried)}`)
          }
          await sleep(100)
        }
      }
      try {
        await progress(step)
        const victim = instances[0]!
        await victim.server!.kill()
        mark(`kill -9 ${victim.name}`)
        await progress(step)
        await start(victim)
        mark(`${victim.name} restarted`)
        await progress(step)
        await postgres.restart()
        mark('Postgres restarted (pg_ctl restart -m fast)')
        await progress(step)
        mark('network to Postgres stalls for 5 s')
        await proxy.stall(5000)
        mark('network to Postgres back')
        await progress(step)
      } catch (error) {
        failures.push(`during the failures: ${(error as Error).message}`)
      }
      stopStarting = true
      mark('no new runs')
    }
    await Promise.all(driving)
    const wallMs = Date.now() - loadStarted
    mark('every driver done')

    // --- afterwards: every subscriber catches up; then the checks -----------------------------------
    stopSubscribers = true
    await Promise.all(subscribing)
    const caughtUp = Date.now() + 120_000
    await Promise.all(
      subscribers.map((subscriber) =>
        watch(subscriber, () => subscriber.ended.size >= runIds.size || Date.now() > caughtUp),
      ),
    )
    for (const subscriber of subscribers) {
      if (subscriber.duplicates.length > 0)
        failures.push(
          `subscriber ${subscriber.number} saw event ids twice: ${subscriber.duplicates.slice(0, 5).join(', ')}`,
        )
      const missing = [...runIds].filter((runId) => !subscriber.ended.has(runId))
      if (missing.length > 0)
        failures.push(`subscriber ${subscriber.number} never saw the end of ${missing.length} runs (${missing[0]} …)`)
    }
    const active = await request('GET', '/api/runs?status=queued,running,requires_action', { prefer: 0 })
    const left = (active.body.items as Array<{ id: string; status: string }>) ?? []
    if (left.length > 0) failures.push(`runs left active: ${left.map((run) => `${run.id} ${run.status}`).join(', ')}`)
    for (const conversation of conversations) failures.push(...(await checkLedger(request, conversation)))
    const executions = (await readFile(join(cwd, 'executions.log'), 'utf8').catch(() => '')).split('\n')
    const times = new Map<string, number>()
    for (const line of executions) if (line) times.set(line, (times.get(line) ?? 0) + 1)
    for (const [line, count] of times) if (count > 1) failures.push(`a tool ran ${count} times: ${line}`)
    for (const instance of instances) await instance.server?.stop()
    const verify = await runPlinth(['audit', 'verify'], { cwd, env: { DATABASE_URL: postgres.url } })
    if (verify.code !== 0) failures.push(`plinth audit verify failed: ${verify.stdout}${verify.stderr}`)
    const errorLines = new Map<string, number>()
    for (const instance of instances) {
      const output = instance.earlier + (instance.server ? instance.server.stdout() + instance.server.stderr() : '')
      for (const line of output.split('\n')) {
        if (!/"level":(50|60)/.test(line)) continue
        const parsed = JSON.parse(line) as { msg?: string; err?: { message?: string } }
        const text = `${parsed.msg ?? ''}${parsed.err?.message ? `: ${parsed.err.message}` : ''}`.slice(0, 300)
        errorLines.set(text, (errorLines.get(text) ?? 0) + 1)
      }
    }
    const runs = conversations.reduce((sum, conversation) => sum + conversation.runs.length, 0)
    return {
      instances: options.instances,
      runs,
      outcomes,
      throughput: (outcomes.completed ?? 0) / (wallMs / 1000),
      wallMs,
      timeline,
      retried,
      subscriberEvents: subscribers.reduce((sum, subscriber) => sum + subscriber.seen.size, 0),
      subscriberReconnects,
      serverErrors: [...errorLines].map(([text, times]) => `${times}× ${text}`),
      failures,
    }
  } finally {
    for (const stream of streams) stream.close()
    for (const instance of instances) await instance.server?.kill()
    // RELIABILITY_LOGS=<dir>: the instances' output is kept there (what a failure needs to be understood).
    if (process.env.RELIABILITY_LOGS)
      for (const [index, instance] of instances.entries())
        await writeFile(
          join(process.env.RELIABILITY_LOGS, `cluster-${options.instances}-${index + 1}.log`),
          instance.earlier + (instance.server ? instance.server.stdout() + instance.server.stderr() : ''),
        ).catch(() => undefined)
    await proxy?.close()
    await postgres?.stop()
    for (const dir of [cwd, ...instances.map((instance) => instance.dataDir)])
      await rm(dir, { recursive: true, force: true })
  }
}

type Request = (
  method: string,
  path: string,
  init: { prefer: number },
) => Promise<{ status: number; body: Record<string, unknown> }>

/** Nothing lost, nothing twice: one user message per run, one answer per call, one closing answer per run. */
async function checkLedger(request: Request, conversation: { id: string; runs: string[] }): Promise<string[]> {
  const problems: string[] = []
  const messages: Array<{
    role: string
    content: unknown
    toolCalls: Array<{ callId: string }> | null
    toolCallId: string | null
  }> = []
  for (let cursor: string | null = null; ;) {
    const page = await request(
      'GET',
      `/api/conversations/${conversation.id}/messages?limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      { prefer: 0 },
    )
    messages.push(...(page.body.items as typeof messages))
    cursor = (page.body.nextCursor as string | null) ?? null
    if (!cursor) break
  }
  const where = `conversation ${conversation.id}`
  const users = messages.filter((message) => message.role === 'user').length
  if (users !== conversation.runs.length)
    problems.push(`${where}: ${users} user messages for ${conversation.runs.length} runs`)
  const closing = messages.filter((message) => JSON.stringify(message.content).includes('All done for this message.'))
  if (closing.length !== conversation.runs.length)
    problems.push(`${where}: ${closing.length} closing answers for ${conversation.runs.length} runs`)
  // In order: each result answers a call made before it and not answered yet (the scripted model reuses
  // call ids from one message to the next, so ids are matched within the open calls).
  const open = new Set<string>()
  for (const message of messages) {
    for (const call of message.toolCalls ?? []) open.add(call.callId)
    if (message.role === 'tool' && message.toolCallId) {
      if (!open.delete(message.toolCallId))
        problems.push(`${where}: a result for ${message.toolCallId} without an open call`)
    }
  }
  if (open.size > 0) problems.push(`${where}: calls never answered: ${[...open].join(', ')}`)
  return problems
}

async function pgQuery(url: string, text: string): Promise<unknown[]> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query(text)).rows
  } finally {
    await client.end()
  }
}
