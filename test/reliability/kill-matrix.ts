import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { random } from '../../bench/retrieval/corpus.js'
import { http, lastLine, runPlinth, startServe, type ServeProcess } from '../helpers/cli-process.js'
import { createTestDatabase, type TestDatabase, type TestEngine } from '../helpers/engines.js'
import { openSse, type SseEvent } from '../helpers/sse-client.js'
import { countingPlugin } from './counting-plugin.js'

// The kill -9 matrix (docs/guides/reliability.md, R1): a real server process is killed with SIGKILL at every
// distinct point of a run — after each state change it announced on the run's stream (chosen from the
// stream, not by sleeping) and at seeded random offsets — then restarted; recovery must leave everything
// consistent.

const counterPlugin = countingPlugin('kill', 150)

/** Three tool rounds (a tool, a tool behind a decision, a client tool), then a streamed answer. */
const script = {
  turnBy: 'round',
  turns: [
    { text: 'Counting first.', toolCalls: [{ name: 'kill__count', arguments: { n: 1 } }] },
    { text: 'Now the guarded one.', toolCalls: [{ name: 'kill__guarded', arguments: { n: 2 } }] },
    { toolCalls: [{ name: 'local_echo', arguments: { text: 'hi' } }] },
    { text: Array.from({ length: 30 }, (_, index) => `a${index}`).join(' '), chunks: 30, delayMs: 15 },
  ],
}
const clientTools = [
  {
    name: 'local_echo',
    description: 'Echoes text on the client',
    parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
  },
]
const terminalEvents = new Set(['run.completed', 'run.failed', 'run.cancelled', 'run.expired'])

export interface KillPoint {
  /** Kill after the client has seen this many events of the run's stream … */
  afterEvents?: number
  /** … or this many milliseconds after the run was created … */
  afterMs?: number
  /** … or while this tool runs for the run (its start is in the tools' log, its end is not). */
  duringTool?: string
  label: string
}

export interface KillMatrixReport {
  engine: TestEngine
  tried: number
  failures: string[]
  /** How the runs ended (completed: N, …). */
  outcomes: Record<string, number>
  /** Points of the reference run a kill can land after. */
  distinctPoints: number
  durationMs: number
}

export interface KillMatrixOptions {
  engine: TestEngine
  /** 'all': every distinct point; a number: that many, spread evenly over the run. */
  points: 'all' | number
  randomOffsets: number
  seed: number
  log?: (line: string) => void
}

export async function runKillMatrix(options: KillMatrixOptions): Promise<KillMatrixReport> {
  const started = Date.now()
  const log = options.log ?? (() => {})
  const cwd = await mkdtemp(join(tmpdir(), `plinth-kill-${options.engine}-`))
  let database: TestDatabase | undefined
  let server: ServeProcess | undefined
  const failures: string[] = []
  const outcomes: Record<string, number> = {}
  let late = 0
  try {
    await writeFile(join(cwd, 'kill-plugin.js'), counterPlugin)
    await writeFile(join(cwd, 'script.json'), JSON.stringify(script))
    await writeFile(
      join(cwd, 'plinth.config.json'),
      JSON.stringify({
        plugins: ['./kill-plugin.js'],
        models: [{ id: 'matrix', provider: 'scripted', script: 'script.json' }],
        defaultModel: 'matrix',
      }),
    )
    const env: Record<string, string> = { PLINTH_RUN_LEASE: '1s' }
    if (options.engine === 'postgres') {
      database = await createTestDatabase('postgres')
      env.DATABASE_URL = database.url!
    }
    const token = lastLine((await runPlinth(['users', 'create', 'matrix'], { cwd, env })).stdout)
    server = await startServe({ cwd, env })

    // The reference run, never killed: its stream gives the points a kill can land after.
    const reference = await drive(server, token, {})
    if (reference.outcome !== 'run.completed') failures.push(`reference run ended ${reference.outcome}`)
    // Each state change is a point; of a streamed text, only its first delta (the rest change nothing new).
    const distinct: number[] = []
    reference.events.forEach((event, index) => {
      if (terminalEvents.has(event.event ?? '')) return
      if (event.event === 'message.delta' && reference.events[index - 1]?.event === 'message.delta') return
      distinct.push(index + 1)
    })
    let chosen = distinct
    if (options.points !== 'all') {
      const count = Math.min(options.points, distinct.length)
      chosen = Array.from(
        { length: count },
        (_, index) => distinct[Math.floor(((index + 0.5) * distinct.length) / count)]!,
      )
    }
    const next = random(options.seed)
    const points: KillPoint[] = [
      ...chosen.map((afterEvents) => ({
        afterEvents,
        label: `after event ${afterEvents} (${reference.events[afterEvents - 1]?.event})`,
      })),
      // In the middle of each tool (the guarded one after a person approved it).
      ...['kill.count', 'kill.guarded'].map((duringTool) => ({ duringTool, label: `while ${duringTool} runs` })),
      ...Array.from({ length: options.randomOffsets }, () => {
        // Within the part of the run a kill can still land in (the reference also counts its stream set-up).
        const afterMs = Math.floor(next() * reference.durationMs * 0.8)
        return { afterMs, label: `${afterMs} ms after the run started` }
      }),
    ]
    log(
      `[kill matrix] ${options.engine}: reference run of ${reference.events.length} events in ${reference.durationMs} ms; ${distinct.length} distinct points; trying ${points.length}`,
    )

    for (const point of points) {
      const where = `${options.engine}, kill ${point.label}`
      const pointStarted = Date.now()
      try {
        const killed = await drive(server, token, { point, toolLog: join(cwd, 'executions.log') })
        if (!killed.killed) {
          // A random offset past this run's end (it ran faster than the reference): nothing to recover.
          if (point.afterMs !== undefined) {
            late++
            continue
          }
          failures.push(`${where}: the run ended before the kill point`)
          continue
        }
        // Restart on the same data: recovery resumes the run (at once on PGlite, after the lease on Postgres).
        server = await startServe({ cwd, env })
        // Recovery must not wait longer than a few leases (1 s here): a 30 s default lease would miss it.
        const recovered = await drive(server, token, {
          runId: killed.runId,
          conversationId: killed.conversationId,
          deadlineMs: 15_000,
        })
        outcomes[recovered.outcome] = (outcomes[recovered.outcome] ?? 0) + 1
        const problems = await check(server, token, killed, recovered, cwd)
        for (const problem of problems) log(`[kill matrix] FAILED ${where}: ${problem}`)
        failures.push(...problems.map((problem) => `${where}: ${problem}`))
        if (process.env.RELIABILITY_VERBOSE === '1')
          log(`[kill matrix] ${where}: ${recovered.outcome} in ${Date.now() - pointStarted} ms`)
      } catch (error) {
        failures.push(`${where}: ${(error as Error).message}`)
        log(`[kill matrix] FAILED ${where}: ${(error as Error).message}`)
        // Leave a working server for the next point.
        if (server && (server.child.exitCode !== null || server.child.signalCode !== null))
          server = await startServe({ cwd, env })
      }
    }
    await server.stop()
    server = undefined
    const verify = await runPlinth(['audit', 'verify'], { cwd, env })
    if (verify.code !== 0)
      failures.push(`${options.engine}: plinth audit verify failed: ${verify.stdout}${verify.stderr}`)
    return {
      engine: options.engine,
      tried: points.length - late,
      failures,
      outcomes,
      distinctPoints: distinct.length,
      durationMs: Date.now() - started,
    }
  } finally {
    await server?.kill()
    await database?.drop()
    await rm(cwd, { recursive: true, force: true })
  }
}

interface Driven {
  runId: string
  conversationId: string
  events: SseEvent[]
  outcome: string
  killed: boolean
  durationMs: number
}

/**
 * Drives one run as a client would: approves its decisions, answers its client tool, follows its
 * stream. With `point`, SIGKILLs the server there. With `runId`, continues an existing run from the
 * start of its stream (a restarted server).
 */
async function drive(
  server: ServeProcess,
  token: string,
  options: { point?: KillPoint; toolLog?: string; runId?: string; conversationId?: string; deadlineMs?: number },
): Promise<Driven> {
  let { runId, conversationId } = options
  const started = Date.now()
  if (!runId) {
    const project = await http(server.url, 'POST', '/api/projects', { token, body: { name: `kill-${Date.now()}` } })
    const conversation = await http(server.url, 'POST', `/api/projects/${project.body.id}/conversations`, {
      token,
      body: {},
    })
    conversationId = conversation.body.id as string
    const run = await http(server.url, 'POST', `/api/conversations/${conversationId}/runs`, {
      token,
      body: { input: 'go', clientTools },
    })
    if (run.status !== 201) throw new Error(`creating the run answered ${run.status}: ${JSON.stringify(run.body)}`)
    runId = run.body.id as string
  }
  const kill = (): void => {
    server.child.kill('SIGKILL')
  }
  // A killed process has a signalCode and no exitCode.
  const gone = (): boolean => server.child.exitCode !== null || server.child.signalCode !== null
  let timer: NodeJS.Timeout | undefined
  let killed = false
  if (options.point?.afterMs !== undefined) {
    timer = setTimeout(() => {
      killed = true
      kill()
    }, options.point.afterMs)
  }
  const duringTool = options.point?.duringTool
  if (duringTool && options.toolLog) {
    const toolLog = options.toolLog
    // Watches the tools' log (no sleeping for a guess): the kill lands between the tool's start and end.
    const watch = async (): Promise<void> => {
      while (!killed && !gone()) {
        const lines = await readFile(toolLog, 'utf8').catch(() => '')
        if (lines.includes(`${duringTool} ${runId} start`)) {
          if (!lines.includes(`${duringTool} ${runId} end`)) {
            killed = true
            kill()
          }
          return
        }
        await new Promise((resolve) => setTimeout(resolve, 5))
      }
    }
    void watch()
  }
  let stream: Awaited<ReturnType<typeof openSse>>
  try {
    stream = await openSse(`${server.url}/api/runs/${runId}/events`, { token })
  } catch (error) {
    // Killed before the client's stream was open: it saw nothing.
    if (!killed && !gone()) throw error
    await new Promise((resolve) => (gone() ? resolve(undefined) : server.child.once('exit', resolve)))
    return {
      runId: runId!,
      conversationId: conversationId!,
      events: [],
      outcome: 'unfinished',
      killed: true,
      durationMs: Date.now() - started,
    }
  }
  const deadline = Date.now() + (options.deadlineMs ?? 30_000)
  let outcome = 'unfinished'
  let ended = false
  void stream.ended.then(() => (ended = true))
  const answered = new Set<string>()
  try {
    for (let seen = 0; ;) {
      if (killed) break
      const remaining = deadline - Date.now()
      if (remaining <= 0)
        throw new Error(
          `the run did not end within ${options.deadlineMs ?? 30_000} ms (last event ${stream.events.at(-1)?.event})`,
        )
      try {
        await stream.waitFor(seen + 1, Math.min(remaining, 500))
      } catch {
        if (killed || gone()) break
        if (ended && stream.events.length <= seen)
          throw new Error(`the stream ended before the run did (last event ${stream.events.at(-1)?.event})`)
        continue
      }
      const event = stream.events[seen]!
      seen++
      if (options.point?.afterEvents === seen) {
        killed = true
        kill()
        break
      }
      if (terminalEvents.has(event.event ?? '')) {
        outcome = event.event!
        break
      }
      // What a person (the decision) and the client (its tool) do when asked; each only once.
      if (event.event === 'decision.required' && !answered.has(event.data.decisionId)) {
        answered.add(event.data.decisionId)
        await http(server.url, 'POST', `/api/decisions/${event.data.decisionId}`, {
          token,
          body: { decision: 'approve' },
        }).catch(() => undefined)
      }
      const outputs =
        event.event === 'run.status'
          ? (event.data.requiredAction?.toolOutputs as Array<{ callId: string }> | undefined)
          : undefined
      for (const call of outputs ?? []) {
        if (answered.has(call.callId)) continue
        answered.add(call.callId)
        await http(server.url, 'POST', `/api/runs/${runId}/tool-outputs`, {
          token,
          body: { outputs: [{ callId: call.callId, output: { accepted: true, echoed: 'hi' } }] },
        }).catch(() => undefined)
      }
    }
  } finally {
    clearTimeout(timer)
    stream.close()
  }
  if (killed) await new Promise((resolve) => (gone() ? resolve(undefined) : server.child.once('exit', resolve)))
  return {
    runId: runId!,
    conversationId: conversationId!,
    events: [...stream.events],
    outcome,
    killed,
    durationMs: Date.now() - started,
  }
}

/** What must hold after a kill and a recovery. */
async function check(
  server: ServeProcess,
  token: string,
  killed: Driven,
  recovered: Driven,
  cwd: string,
): Promise<string[]> {
  const problems: string[] = []
  if (!terminalEvents.has(recovered.outcome)) problems.push(`the run did not end (${recovered.outcome})`)
  else if (recovered.outcome !== 'run.completed') {
    const run = await http(server.url, 'GET', `/api/runs/${killed.runId}`, { token })
    problems.push(`the run ended ${recovered.outcome}: ${JSON.stringify(run.body.error)}`)
  }
  // Every event the client saw before the kill replays, with the same id and type.
  const replayed = new Map(recovered.events.map((event) => [event.id, event.event]))
  for (const event of killed.events) {
    if (event.id === undefined) continue
    if (replayed.get(event.id) !== event.event)
      problems.push(`event ${event.id} (${event.event}) seen before the kill does not replay`)
  }
  // The ledger, as a client reads it: every call answered exactly once, nothing answered that was not called.
  const messages = await http(server.url, 'GET', `/api/conversations/${killed.conversationId}/messages?limit=200`, {
    token,
  })
  const called = new Set<string>()
  const answered = new Map<string, number>()
  for (const message of messages.body.items as Array<{
    role: string
    toolCalls: Array<{ callId: string }> | null
    toolCallId: string | null
  }>) {
    for (const call of message.toolCalls ?? []) called.add(call.callId)
    if (message.role === 'tool' && message.toolCallId) {
      if (!called.has(message.toolCallId))
        problems.push(`a result for ${message.toolCallId} before (or without) its call`)
      answered.set(message.toolCallId, (answered.get(message.toolCallId) ?? 0) + 1)
    }
  }
  for (const callId of called)
    if (answered.get(callId) !== 1) problems.push(`call ${callId} answered ${answered.get(callId) ?? 0} times`)
  // No tool ran twice for this run (the plugin logs each start).
  const executions = (await readFile(join(cwd, 'executions.log'), 'utf8').catch(() => ''))
    .split('\n')
    .filter((line) => line.includes(` ${killed.runId} start`))
  for (const command of ['kill.count', 'kill.guarded']) {
    const times = executions.filter((line) => line.startsWith(`${command} `)).length
    if (times > 1) problems.push(`${command} ran ${times} times`)
  }
  // Nothing left active, and the conversation takes a new message.
  const runs = await http(server.url, 'GET', `/api/runs?status=queued,running,requires_action`, { token })
  if (runs.body.items.length > 0)
    problems.push(
      `runs left active: ${runs.body.items.map((run: { id: string; status: string }) => `${run.id} ${run.status}`).join(', ')}`,
    )
  const next = await http(server.url, 'POST', `/api/conversations/${killed.conversationId}/runs`, {
    token,
    body: { input: 'again', clientTools },
  })
  if (next.status !== 201) problems.push(`the conversation is blocked: a new message answered ${next.status}`)
  else await http(server.url, 'POST', `/api/runs/${next.body.id}/cancel`, { token })
  return problems
}
