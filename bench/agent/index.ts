/**
 * The agent-round bench (`BENCH_ONLY=agent npm run bench`): user asks → the model calls get_weather
 * (`{"city":"Paris"}` in 3 chunks) → the command returns a constant → the model answers in 20 chunks,
 * against an instant fake OpenAI-compatible upstream in its own process, through Plinth's HTTP API
 * with the run streamed over SSE and everything persisted; beside the raw cost of the same two
 * upstream calls with plain fetch, measured interleaved in the same run. On PGlite and on pg.
 * Then time to first token against a paced upstream, and the SSE fan-out of one run.
 *
 * Env: BENCH_ROUNDS (200), BENCH_AGENT_WARMUP (20), BENCH_TTFT_ROUNDS (20, paced, 0 = off),
 * BENCH_SUBSCRIBERS (1000, 0 = no fan-out), BENCH_CONCURRENT_RUNS (200) × BENCH_CONCURRENT_ROUNDS (3) with
 * BENCH_CONCURRENT_MODEL (a model id of the bench's config: `fake-fanout` streams each answer in 50 chunks
 * 10 ms apart, as a real model does; default the instant one). To see where a round's time goes: BENCH_TRACE=1 (when each
 * event arrives, p50), BENCH_QUERY_LOG=1 (every SQL statement the server sends, on stderr),
 * BENCH_CPU_PROF=<dir> (a V8 CPU profile of each child process, written when it exits).
 */
import { writeFile } from 'node:fs/promises'
import { performance } from 'node:perf_hooks'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { startChildServer, type ChildServer } from '../lib/child-server.js'
import { createTempDatabase, createTempDir } from '../lib/resources.js'
import { plinthRound, rawHistory, rawRound, type PlinthTarget, type RoundTiming } from './agent-round.js'
import { measureFanOut, type FanOutResult } from './fan-out.js'
import { ms, summarize, table, type Summary } from './stats.js'
import { unlimitedEnv } from '../lib/unlimited-env.js'

interface AgentSettings {
  rounds: number
  warmup: number
  ttftRounds: number
  subscribers: number
  /** Messages already in the conversation for the long-conversation comparison (0 = off). */
  history: number
  /** Runs at once for the concurrency phase (0 = off), each of `concurrentRounds` rounds. */
  concurrent: number
  concurrentRounds: number
  /** The concurrent runs' model id (empty: the instant one; `fake-fanout`: answers in 50 chunks 10 ms apart). */
  concurrentModel: string
}

interface LongConversationResult {
  messages: number
  fresh: Summary
  long: Summary
  /** The same two upstream calls with plain fetch, with the long conversation's messages and without. */
  rawFresh: Summary
  rawLong: Summary
}

interface ConcurrentResult {
  runs: number
  rounds: number
  completed: number
  failed: number
  round: Summary
  wallMs: number
  rssMbBefore: number
  rssMbAfter: number
}

interface EngineResult {
  engine: string
  plinth: Summary
  raw: Summary
  ttftAdded: number
  pacedTtftAdded: number
  eventsPerRound: number
  queriesPerRound: number
  queryMsPerRound: number
  cpuMsPerRound: number
  fanOut?: FanOutResult
  long?: LongConversationResult
  concurrent?: ConcurrentResult
}

export const pacedTtftModel = { id: 'fake-paced', model: 'paced-20x10ms' }
const fanOutModel = { id: 'fake-fanout', model: 'paced-50x10ms' }
const weatherPlugin = fileURLToPath(new URL('../plugins/weather.ts', import.meta.url))

export function loadAgentSettings(env: NodeJS.ProcessEnv = process.env): AgentSettings {
  const setting = (name: string, fallback: number, min: number): number => {
    const raw = env[name]
    if (raw === undefined || raw === '') return fallback
    const value = Number(raw)
    if (!Number.isInteger(value) || value < min)
      throw new Error(`${name} must be an integer ≥ ${min}, got ${JSON.stringify(raw)}`)
    return value
  }
  return {
    rounds: setting('BENCH_ROUNDS', 200, 1),
    warmup: setting('BENCH_AGENT_WARMUP', 20, 0),
    ttftRounds: setting('BENCH_TTFT_ROUNDS', 20, 0),
    subscribers: setting('BENCH_SUBSCRIBERS', 1000, 0),
    history: setting('BENCH_HISTORY', 500, 0),
    concurrent: setting('BENCH_CONCURRENT_RUNS', 200, 0),
    concurrentRounds: setting('BENCH_CONCURRENT_ROUNDS', 3, 1),
    concurrentModel: env.BENCH_CONCURRENT_MODEL ?? '',
  }
}

/** Runs the agent bench on PGlite and (with `adminUrl`) on a fresh pg database; prints as it goes. */
export async function runAgentBench(adminUrl: string | undefined, settings = loadAgentSettings()): Promise<void> {
  console.log(
    `agent bench: ${settings.rounds} rounds after ${settings.warmup} warm-up, one at a time, Plinth and raw fetch interleaved; ` +
      `${settings.ttftRounds} paced TTFT rounds; fan-out to ${settings.subscribers} subscribers`,
  )
  const upstream = await startChildServer('bench/servers/fake-openai-server.ts')
  const results: Array<EngineResult | { engine: string; skipped: string }> = []
  try {
    results.push(await onEngine('PGlite', undefined, upstream.url, settings))
    if (adminUrl) {
      const database = await createTempDatabase(adminUrl)
      try {
        results.push(await onEngine('pg', database.url, upstream.url, settings))
      } finally {
        await database.drop()
      }
    } else {
      results.push({ engine: 'pg', skipped: 'set TEST_DATABASE_URL or BENCH_DATABASE_URL' })
    }
  } finally {
    await upstream.stop()
  }
  console.log(`\n${formatResults(results)}`)
}

async function onEngine(
  engine: string,
  databaseUrl: string | undefined,
  upstreamUrl: string,
  settings: AgentSettings,
): Promise<EngineResult> {
  console.log(`  ${engine}: starting`)
  const plinth = await startPlinthAgent(upstreamUrl, databaseUrl)
  try {
    const target = plinth.target
    const conversations = await createConversations(
      target,
      plinth.projectId,
      settings.warmup + settings.rounds + settings.ttftRounds + 1,
    )
    const take = (): string => conversations.shift() ?? ''

    const plinthTimes: Array<RoundTiming & { trace: Array<[string, number]> }> = []
    const rawTimes: RoundTiming[] = []
    let events = 0
    let before = await plinth.stats()
    for (let round = 0; round < settings.warmup + settings.rounds; round++) {
      if (round === settings.warmup) before = await plinth.stats()
      const viaPlinth = await plinthRound(target, take())
      const raw = await rawRound(upstreamUrl)
      if (round < settings.warmup) continue
      plinthTimes.push(viaPlinth)
      rawTimes.push(raw)
      events += viaPlinth.events
    }
    const after = await plinth.stats()
    const result: EngineResult = {
      engine,
      plinth: summarize(plinthTimes.map((time) => time.totalMs)),
      raw: summarize(rawTimes.map((time) => time.totalMs)),
      ttftAdded:
        summarize(plinthTimes.map((time) => time.ttftMs)).p50 - summarize(rawTimes.map((time) => time.ttftMs)).p50,
      pacedTtftAdded: Number.NaN,
      eventsPerRound: events / settings.rounds,
      queriesPerRound: (after.queries - before.queries) / settings.rounds,
      queryMsPerRound: (after.queryMs - before.queryMs) / settings.rounds,
      cpuMsPerRound: (after.cpuMs - before.cpuMs) / settings.rounds,
    }
    console.log(`  ${engine}: round p50 ${ms(result.plinth.p50)} ms, raw p50 ${ms(result.raw.p50)} ms`)
    // BENCH_TRACE=1: when each event of a round arrives (p50 over the measured rounds, ms after the POST).
    if (process.env.BENCH_TRACE) {
      const first = plinthTimes[0]?.trace ?? []
      const rows = first.map(([name], index) => [
        name,
        ms(summarize(plinthTimes.map((time) => time.trace[index]?.[1] ?? Number.NaN)).p50),
      ])
      console.log(table(['event', 'p50 ms'], rows))
      console.log(
        `  server user cpu ${ms((after.userMs - before.userMs) / settings.rounds)} ms per round (the rest of its cpu is system time)`,
      )
    }

    if (settings.ttftRounds > 0) {
      const plinthTtft: number[] = []
      const rawTtft: number[] = []
      for (let round = 0; round < settings.ttftRounds; round++) {
        plinthTtft.push((await plinthRound(target, take(), { model: pacedTtftModel.id, checkAnswer: false })).ttftMs)
        rawTtft.push((await rawRound(upstreamUrl, pacedTtftModel.model)).ttftMs)
      }
      result.pacedTtftAdded = summarize(plinthTtft).p50 - summarize(rawTtft).p50
    }
    if (settings.history > 0) {
      result.long = await measureLongConversation(target, plinth.projectId, upstreamUrl, settings)
      console.log(
        `  ${engine}: round p50 in a conversation of ${settings.history} messages ${ms(result.long.long.p50)} ms, in a new one ${ms(result.long.fresh.p50)} ms`,
      )
    }
    if (settings.concurrent > 0) {
      result.concurrent = await measureConcurrent(target, plinth.projectId, settings, plinth.stats)
      console.log(
        `  ${engine}: ${result.concurrent.completed}/${result.concurrent.runs * result.concurrent.rounds} concurrent rounds completed, p99 ${ms(result.concurrent.round.p99)} ms`,
      )
    }
    if (settings.subscribers > 0) {
      result.fanOut = await measureFanOut(target, take(), {
        subscribers: settings.subscribers,
        model: fanOutModel.id,
        connectTimeoutMs: 120_000,
        timeoutMs: 60_000,
      })
      console.log(`  ${engine}: fan-out delivery lag p99 ${ms(result.fanOut.lag.p99)} ms`)
    }
    return result
  } finally {
    await plinth.stop()
  }
}

export async function startPlinthAgent(
  upstreamUrl: string,
  databaseUrl: string | undefined,
  env: Record<string, string> = {},
  root?: string,
  script = 'bench/servers/plinth-agent-server.ts',
): Promise<
  ChildServer & {
    target: PlinthTarget
    projectId: string
    stats(): Promise<{ queries: number; queryMs: number; cpuMs: number; userMs: number; rssMb: number }>
  }
> {
  const dataDir = await createTempDir('plinth-agent-bench-')
  try {
    const model = (id: string, name: string) => ({
      id,
      provider: 'openai',
      model: name,
      baseUrl: upstreamUrl,
      contextWindow: 128_000,
      supportsTools: true,
    })
    const configPath = join(dataDir.path, 'plinth.config.json')
    const config = {
      plugins: [weatherPlugin],
      models: [
        model('fake', 'm'),
        model(pacedTtftModel.id, pacedTtftModel.model),
        model(fanOutModel.id, fanOutModel.model),
      ],
      defaultModel: 'fake',
    }
    await writeFile(configPath, JSON.stringify(config, null, 2))
    const server = await startChildServer(script, {
      root,
      env: {
        HOST: '127.0.0.1',
        PORT: '0',
        PLINTH_CONFIG: configPath,
        PLINTH_DATA_DIR: dataDir.path,
        PLINTH_LOG_LEVEL: 'silent',
        ...unlimitedEnv,
        ...(databaseUrl && { DATABASE_URL: databaseUrl }),
        ...env,
      },
    })
    const { token, projectId, statsUrl } = server.info
    if (typeof token !== 'string' || typeof projectId !== 'string' || typeof statsUrl !== 'string') {
      await server.stop()
      throw new Error('plinth-agent-server did not report a token, project and stats URL')
    }
    return {
      ...server,
      target: { url: server.url, token },
      projectId,
      stats: async () =>
        (await (await fetch(statsUrl)).json()) as {
          queries: number
          queryMs: number
          cpuMs: number
          userMs: number
          rssMb: number
        },
      stop: async () => {
        await server.stop()
        await dataDir.remove()
      },
    }
  } catch (error) {
    await dataDir.remove()
    throw error
  }
}

/**
 * The same round in a conversation that already holds `history` messages (filled by earlier rounds,
 * four messages each), interleaved with rounds in new conversations: what length costs per round.
 */
async function measureLongConversation(
  target: PlinthTarget,
  projectId: string,
  upstreamUrl: string,
  settings: AgentSettings,
): Promise<LongConversationResult> {
  const samples = Math.max(20, Math.min(50, settings.rounds))
  const [longConversation, ...fresh] = await createConversations(target, projectId, samples + 1)
  for (let filled = 0; filled < settings.history; filled += 4) await plinthRound(target, longConversation!)
  const longRounds: Array<Awaited<ReturnType<typeof plinthRound>>> = []
  const freshRounds: Array<Awaited<ReturnType<typeof plinthRound>>> = []
  // What the longer prompt costs the upstream itself (sending, parsing): any client pays it.
  const history = rawHistory(settings.history)
  const rawLong: number[] = []
  const rawFresh: number[] = []
  for (let round = 0; round < samples; round++) {
    longRounds.push(await plinthRound(target, longConversation!))
    freshRounds.push(await plinthRound(target, fresh[round]!))
    rawLong.push((await rawRound(upstreamUrl, 'm', history)).totalMs)
    rawFresh.push((await rawRound(upstreamUrl)).totalMs)
  }
  // BENCH_TRACE=1: when each event arrives in the long conversation and in new ones (p50, ms after the POST).
  if (process.env.BENCH_TRACE) {
    const at = (rounds: typeof longRounds, index: number) =>
      ms(summarize(rounds.map((round) => round.trace[index]?.[1] ?? Number.NaN)).p50)
    const rows = (longRounds[0]?.trace ?? []).map(([name], index) => [
      name,
      at(longRounds, index),
      at(freshRounds, index),
    ])
    console.log(table(['event', `p50 ms, ${settings.history} messages before`, 'p50 ms, new conversation'], rows))
  }
  return {
    messages: settings.history,
    fresh: summarize(freshRounds.map((round) => round.totalMs)),
    long: summarize(longRounds.map((round) => round.totalMs)),
    rawFresh: summarize(rawFresh),
    rawLong: summarize(rawLong),
  }
}

/** `concurrent` runs at once in their own conversations, each of `concurrentRounds` rounds one after another. */
async function measureConcurrent(
  target: PlinthTarget,
  projectId: string,
  settings: AgentSettings,
  stats: () => Promise<{ rssMb?: number }>,
): Promise<ConcurrentResult> {
  const conversations = await createConversations(target, projectId, settings.concurrent)
  const rssMbBefore = (await stats()).rssMb ?? Number.NaN
  const times: number[] = []
  let failed = 0
  const started = performance.now()
  await Promise.all(
    conversations.map(async (conversationId) => {
      for (let round = 0; round < settings.concurrentRounds; round++) {
        try {
          const model = settings.concurrentModel ? { model: settings.concurrentModel, checkAnswer: false } : {}
          times.push((await plinthRound(target, conversationId, model)).totalMs)
        } catch {
          failed++
        }
      }
    }),
  )
  const wallMs = performance.now() - started
  const rssMbAfter = (await stats()).rssMb ?? Number.NaN
  return {
    runs: settings.concurrent,
    rounds: settings.concurrentRounds,
    completed: times.length,
    failed,
    round: summarize(times),
    wallMs,
    rssMbBefore,
    rssMbAfter,
  }
}

/** Conversations made ahead of time (one active run per conversation), outside anything timed. */
export async function createConversations(target: PlinthTarget, projectId: string, count: number): Promise<string[]> {
  const ids: string[] = []
  for (let index = 0; index < count; index++) {
    const response = await fetch(`${target.url}/api/projects/${projectId}/conversations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${target.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ title: `round ${index}` }),
    })
    const body = (await response.json()) as { id?: string }
    if (response.status !== 201 || !body.id) throw new Error(`creating a conversation answered ${response.status}`)
    ids.push(body.id)
  }
  return ids
}

const references =
  'reference streaming overhead p50: AI SDK 4.4 ms (no persistence, no HTTP), Mastra 9.0 ms, LangGraph.js 11.1 ms in memory / 19.7 ms with its Postgres checkpointer; target ≤ 5 ms on pg'

function formatResults(results: Array<EngineResult | { engine: string; skipped: string }>): string {
  const measured = results.filter((result): result is EngineResult => !('skipped' in result))
  const rounds = table(
    [
      'agent round (ms)',
      'plinth p50',
      'p95',
      'raw p50',
      'p95',
      'overhead p50',
      'TTFT added',
      'paced TTFT added',
      'events',
      'db queries',
      'db ms',
      'server cpu ms',
    ],
    measured.map((result) => [
      result.engine,
      ms(result.plinth.p50),
      ms(result.plinth.p95),
      ms(result.raw.p50),
      ms(result.raw.p95),
      ms(result.plinth.p50 - result.raw.p50),
      ms(result.ttftAdded),
      ms(result.pacedTtftAdded),
      result.eventsPerRound.toFixed(0),
      result.queriesPerRound.toFixed(0),
      ms(result.queryMsPerRound),
      ms(result.cpuMsPerRound),
    ]),
  )
  const fanOuts = measured.filter((result) => result.fanOut)
  const fanOut = table(
    [
      'SSE fan-out (ms)',
      'subscribers',
      'events each',
      'deltas',
      'missing',
      'lag p50',
      'p99',
      'max',
      'POST→first done',
      'POST→all done',
      'connect all',
    ],
    fanOuts.map(({ engine, fanOut: f }) => [
      engine,
      String(f!.subscribers),
      String(f!.eventsPerSubscriber),
      String(f!.deltasPerSubscriber),
      String(f!.missing),
      ms(f!.lag.p50),
      ms(f!.lag.p99),
      ms(f!.lag.max),
      ms(f!.firstCompletedMs),
      ms(f!.allCompletedMs),
      ms(f!.connectMs),
    ]),
  )
  const longs = measured.filter((result) => result.long)
  const long = table(
    [
      'long conversation (ms)',
      'messages before',
      'round p50 there',
      'p95',
      'new conversation p50',
      'p95',
      'ratio p50',
      'raw p50 there / new',
      'ratio less the upstream’s part',
    ],
    longs.map(({ engine, long: l }) => [
      engine,
      String(l!.messages),
      ms(l!.long.p50),
      ms(l!.long.p95),
      ms(l!.fresh.p50),
      ms(l!.fresh.p95),
      (l!.long.p50 / l!.fresh.p50).toFixed(2),
      `${ms(l!.rawLong.p50)} / ${ms(l!.rawFresh.p50)}`,
      ((l!.long.p50 - (l!.rawLong.p50 - l!.rawFresh.p50)) / l!.fresh.p50).toFixed(2),
    ]),
  )
  const concurrents = measured.filter((result) => result.concurrent)
  const concurrent = table(
    [
      'concurrent runs (ms)',
      'runs × rounds',
      'completed',
      'failed',
      'round p50',
      'p99',
      'max',
      'wall',
      'server RSS before → after (MB)',
    ],
    concurrents.map(({ engine, concurrent: c }) => [
      engine,
      `${c!.runs} × ${c!.rounds}`,
      String(c!.completed),
      String(c!.failed),
      ms(c!.round.p50),
      ms(c!.round.p99),
      ms(c!.round.max),
      ms(c!.wallMs),
      `${c!.rssMbBefore.toFixed(0)} → ${c!.rssMbAfter.toFixed(0)}`,
    ]),
  )
  const skipped = results
    .filter((result) => 'skipped' in result)
    .map((result) => `${result.engine}: skipped (${(result as { skipped: string }).skipped})`)
  return [
    rounds,
    ...(longs.length > 0 ? [long] : []),
    ...(concurrents.length > 0 ? [concurrent] : []),
    ...skipped,
    '  overhead = plinth p50 − raw p50; TTFT added = plinth (POST → first message.delta) p50 − raw (start → first content chunk of the 2nd call) p50;',
    '  paced: the answer streams 20 chunks 10 ms apart; events = SSE events per round; db = round trips / ms awaiting them in the server, per round;',
    '  server cpu = CPU time (user + system) of the Plinth process per round',
    ...(longs.length > 0
      ? [
          '  long conversation: target ratio ≤ 1.2 (the round there ÷ the round in a new conversation); raw: the same two upstream calls',
          '  with plain fetch, with that many messages and without; less the upstream’s part: the round there less what the longer prompt',
          '  added to raw fetch, ÷ the round in a new conversation (what the length costs Plinth itself)',
        ]
      : []),
    `  ${references}`,
    ...(fanOuts.length > 0
      ? [
          '',
          fanOut,
          '  lag = receive time − first receipt of the same event by any subscriber, over every delivery of every run event',
        ]
      : []),
  ].join('\n')
}
