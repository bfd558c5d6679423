/**
 * The AG-UI bench (`BENCH_ONLY=ag-ui npm run bench`): the agent round of bench/agent (get_weather,
 * then a 20-chunk answer, against the instant fake OpenAI upstream in its own process) through
 * `POST /api/conversations/:id/ag-ui` beside the native run stream — `POST …/runs` with
 * `Accept: text/event-stream`, and `POST …/runs` then `GET /api/runs/:id/events` — interleaved round
 * by round (the order rotating) on one server, each round in a new conversation; on PGlite and on pg.
 * Then time to first text against the paced upstream (20 chunks 10 ms apart), and the server's CPU
 * per round of each route (measured in blocks). Targets (issue 23): time to first text within 1 ms of
 * the native route; per-round overhead within 10 %.
 *
 * Env: BENCH_AGUI_ROUNDS (per route, default 200), BENCH_AGUI_WARMUP (20), BENCH_AGUI_TTFT_ROUNDS (20),
 * BENCH_AGUI_CPU_ROUNDS (100 per route, 0 = off).
 */
import { createConversations, pacedTtftModel, startPlinthAgent } from '../agent/index.js'
import { ms, summarize, table, type Summary } from '../agent/stats.js'
import { startChildServer } from '../lib/child-server.js'
import { createTempDatabase } from '../lib/resources.js'
import { round, type Route } from './rounds.js'

const routes: Route[] = ['native', 'native GET', 'AG-UI']

interface Settings {
  rounds: number
  warmup: number
  ttftRounds: number
  cpuRounds: number
}

interface EngineResult {
  engine: string
  total: Record<Route, Summary>
  ttft: Record<Route, Summary>
  pacedTtft: Record<Route, Summary> | null
  cpuMs: Record<Route, number> | null
}

function loadSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const setting = (name: string, fallback: number, min: number): number => {
    const raw = env[name]
    if (raw === undefined || raw === '') return fallback
    const value = Number(raw)
    if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer ≥ ${min}, got ${JSON.stringify(raw)}`)
    return value
  }
  return {
    rounds: setting('BENCH_AGUI_ROUNDS', 200, 1),
    warmup: setting('BENCH_AGUI_WARMUP', 20, 0),
    ttftRounds: setting('BENCH_AGUI_TTFT_ROUNDS', 20, 0),
    cpuRounds: setting('BENCH_AGUI_CPU_ROUNDS', 100, 0),
  }
}

export async function runAgUiBench(databaseUrl: string | undefined): Promise<void> {
  const settings = loadSettings()
  console.log(
    `ag-ui bench: ${settings.rounds} rounds per route after ${settings.warmup} warm-up, routes interleaved (${routes.join(', ')}); ` +
      `${settings.ttftRounds} paced TTFT rounds; ${settings.cpuRounds} rounds per route for server CPU`,
  )
  const upstream = await startChildServer('bench/servers/fake-openai-server.ts')
  const results: EngineResult[] = []
  const skipped: string[] = []
  try {
    results.push(await onEngine('PGlite', undefined, upstream.url, settings))
    if (databaseUrl) {
      const database = await createTempDatabase(databaseUrl)
      try {
        results.push(await onEngine('pg', database.url, upstream.url, settings))
      } finally {
        await database.drop()
      }
    } else skipped.push('pg: skipped (set TEST_DATABASE_URL or BENCH_DATABASE_URL)')
  } finally {
    await upstream.stop()
  }
  console.log(`\n${format(results, skipped)}`)
}

async function onEngine(engine: string, databaseUrl: string | undefined, upstreamUrl: string, settings: Settings): Promise<EngineResult> {
  console.log(`  ${engine}: starting`)
  const plinth = await startPlinthAgent(upstreamUrl, databaseUrl)
  try {
    const { target, projectId } = plinth
    const rounds = settings.warmup + settings.rounds
    const conversations = await createConversations(target, projectId, routes.length * (rounds + settings.ttftRounds + settings.cpuRounds))
    const take = (): string => conversations.shift() ?? ''
    const total = Object.fromEntries(routes.map((route) => [route, [] as number[]])) as Record<Route, number[]>
    const ttft = Object.fromEntries(routes.map((route) => [route, [] as number[]])) as Record<Route, number[]>
    for (let index = 0; index < rounds; index++) {
      for (const route of rotate(routes, index)) {
        const timing = await round(route, target, take())
        if (index < settings.warmup) continue
        total[route].push(timing.totalMs)
        ttft[route].push(timing.ttftMs)
      }
    }
    const result: EngineResult = { engine, total: summaries(total), ttft: summaries(ttft), pacedTtft: null, cpuMs: null }
    console.log(`  ${engine}: round p50 native ${ms(result.total.native.p50)} ms, AG-UI ${ms(result.total['AG-UI'].p50)} ms`)
    if (settings.ttftRounds > 0) {
      const paced = Object.fromEntries(routes.map((route) => [route, [] as number[]])) as Record<Route, number[]>
      for (let index = 0; index < settings.ttftRounds; index++) {
        for (const route of rotate(routes, index)) paced[route].push((await round(route, target, take(), { model: pacedTtftModel.id, checkAnswer: false })).ttftMs)
      }
      result.pacedTtft = summaries(paced)
    }
    if (settings.cpuRounds > 0) {
      const cpu = {} as Record<Route, number>
      for (const route of routes) {
        const before = await plinth.stats()
        for (let index = 0; index < settings.cpuRounds; index++) await round(route, target, take())
        cpu[route] = ((await plinth.stats()).cpuMs - before.cpuMs) / settings.cpuRounds
      }
      result.cpuMs = cpu
    }
    return result
  } finally {
    await plinth.stop()
  }
}

/** The routes starting at a different one each round, so none always goes first. */
function rotate<T>(items: readonly T[], by: number): T[] {
  const start = by % items.length
  return [...items.slice(start), ...items.slice(0, start)]
}

function summaries(values: Record<Route, number[]>): Record<Route, Summary> {
  return Object.fromEntries(routes.map((route) => [route, summarize(values[route])])) as Record<Route, Summary>
}

function format(results: EngineResult[], skipped: string[]): string {
  const percent = (value: number, base: number): string => `${(((value - base) / base) * 100).toFixed(1)} %`
  const rows = results.flatMap((result) =>
    routes.map((route) => [
      `${result.engine}, ${route}`,
      ms(result.total[route].p50),
      ms(result.total[route].p95),
      route === 'native' ? '' : percent(result.total[route].p50, result.total.native.p50),
      ms(result.ttft[route].p50),
      route === 'native' ? '' : ms(result.ttft[route].p50 - result.ttft.native.p50),
      result.pacedTtft ? ms(result.pacedTtft[route].p50) : 'n/a',
      result.pacedTtft && route !== 'native' ? ms(result.pacedTtft[route].p50 - result.pacedTtft.native.p50) : '',
      result.cpuMs ? ms(result.cpuMs[route]) : 'n/a',
    ]),
  )
  return [
    table(['agent round (ms)', 'round p50', 'p95', 'vs native', 'first text p50', 'vs native', 'paced first text p50', 'vs native', 'server cpu ms'], rows),
    ...skipped,
    '  native: POST /runs with Accept: text/event-stream; native GET: POST /runs, then GET /api/runs/:id/events; AG-UI: POST /ag-ui (RunAgentInput);',
    '  first text = request sent → first message.delta / TEXT_MESSAGE_CONTENT; paced: the answer streams 20 chunks 10 ms apart;',
    '  targets: AG-UI first text within 1 ms of native, round within 10 % of native',
  ].join('\n')
}
