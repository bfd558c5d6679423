/**
 * The frontend-routes bench (`BENCH_ONLY=frontends npm run bench`; `BENCH_ONLY=ag-ui` runs the same):
 * the agent round of bench/agent (get_weather, then a 20-chunk answer, against the instant fake OpenAI
 * upstream in its own process) through `POST /api/conversations/:id/ag-ui` and through
 * `POST /api/conversations/:id/ui-stream` (the AI SDK's UI message stream) beside the native run
 * stream — `POST …/runs` with `Accept: text/event-stream`, and `POST …/runs` then
 * `GET /api/runs/:id/events` — interleaved round by round (the order rotating) on one server, each
 * round in a new conversation; on PGlite and on pg. Then time to first text against the paced upstream
 * (20 chunks 10 ms apart), the server's CPU per round of each route (measured in blocks), and in
 * process what each frontend route's input check and mapping cost per round. Targets
 * (docs/ag-ui.md#performance): time to first text within 1 ms of the native route; per-round overhead
 * within 10 %.
 *
 * Env: BENCH_AGUI_ROUNDS (per route, default 200), BENCH_AGUI_WARMUP (20), BENCH_AGUI_TTFT_ROUNDS (20),
 * BENCH_AGUI_CPU_ROUNDS (100 per route, 0 = off).
 */
import { createConversations, pacedTtftModel, startPlinthAgent } from '../agent/index.js'
import { ms, summarize, table, type Summary } from '../agent/stats.js'
import { startChildServer } from '../lib/child-server.js'
import { createTempDatabase } from '../lib/resources.js'
import { measureMappingCost, type MappingCost } from './mapping-cost.js'
import { round, type Route } from './rounds.js'

const routes: Route[] = ['native', 'native GET', 'AG-UI', 'UI stream']

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
  /** Median of the per-round differences route − native (rounds measured back to back cancel the machine's drift). */
  pairedTotal: Record<Route, number>
  pairedTtft: Record<Route, number>
  pacedTtft: Record<Route, Summary> | null
  pairedPacedTtft: Record<Route, number> | null
  cpuMs: Record<Route, number> | null
  mapping: MappingCost
}

function loadSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const setting = (name: string, fallback: number, min: number): number => {
    const raw = env[name]
    if (raw === undefined || raw === '') return fallback
    const value = Number(raw)
    if (!Number.isInteger(value) || value < min)
      throw new Error(`${name} must be an integer ≥ ${min}, got ${JSON.stringify(raw)}`)
    return value
  }
  return {
    rounds: setting('BENCH_AGUI_ROUNDS', 200, 1),
    warmup: setting('BENCH_AGUI_WARMUP', 20, 0),
    ttftRounds: setting('BENCH_AGUI_TTFT_ROUNDS', 20, 0),
    cpuRounds: setting('BENCH_AGUI_CPU_ROUNDS', 100, 0),
  }
}

export async function runFrontendsBench(databaseUrl: string | undefined): Promise<void> {
  const settings = loadSettings()
  console.log(
    `frontends bench (AG-UI, UI stream): ${settings.rounds} rounds per route after ${settings.warmup} warm-up, routes interleaved (${routes.join(', ')}); ` +
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

async function onEngine(
  engine: string,
  databaseUrl: string | undefined,
  upstreamUrl: string,
  settings: Settings,
): Promise<EngineResult> {
  console.log(`  ${engine}: starting`)
  const plinth = await startPlinthAgent(upstreamUrl, databaseUrl)
  try {
    const { target, projectId } = plinth
    const rounds = settings.warmup + settings.rounds
    const conversations = await createConversations(
      target,
      projectId,
      routes.length * (rounds + settings.ttftRounds + settings.cpuRounds) + 1,
    )
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
    const mapping = await measureMappingCost(target, await completedRun(target, conversations.shift() ?? ''), 'c')
    const result: EngineResult = {
      engine,
      total: summaries(total),
      ttft: summaries(ttft),
      pairedTotal: paired(total),
      pairedTtft: paired(ttft),
      pacedTtft: null,
      pairedPacedTtft: null,
      cpuMs: null,
      mapping,
    }
    console.log(
      `  ${engine}: round p50 native ${ms(result.total.native.p50)} ms, AG-UI ${ms(result.total['AG-UI'].p50)} ms, UI stream ${ms(result.total['UI stream'].p50)} ms`,
    )
    if (settings.ttftRounds > 0) {
      const paced = Object.fromEntries(routes.map((route) => [route, [] as number[]])) as Record<Route, number[]>
      for (let index = 0; index < settings.ttftRounds; index++) {
        for (const route of rotate(routes, index))
          paced[route].push(
            (await round(route, target, take(), { model: pacedTtftModel.id, checkAnswer: false })).ttftMs,
          )
      }
      result.pacedTtft = summaries(paced)
      result.pairedPacedTtft = paired(paced)
    }
    if (settings.cpuRounds > 0) {
      // The server's CPU time over blocks of one route at a time, the blocks alternating so that
      // other load on the machine spreads over every route alike.
      const cpu = Object.fromEntries(routes.map((route) => [route, 0])) as Record<Route, number>
      const blocks = 5
      const perBlock = Math.max(1, Math.round(settings.cpuRounds / blocks))
      for (let block = 0; block < blocks; block++) {
        for (const route of rotate(routes, block)) {
          const before = await plinth.stats()
          for (let index = 0; index < perBlock; index++) await round(route, target, take())
          cpu[route] += (await plinth.stats()).cpuMs - before.cpuMs
        }
      }
      for (const route of routes) cpu[route] /= blocks * perBlock
      result.cpuMs = cpu
    }
    return result
  } finally {
    await plinth.stop()
  }
}

/** A round through POST /runs?wait=true: the id of its completed run. */
async function completedRun(target: { url: string; token: string }, conversationId: string): Promise<string> {
  const response = await fetch(`${target.url}/api/conversations/${conversationId}/runs?wait=true`, {
    method: 'POST',
    headers: { authorization: `Bearer ${target.token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ input: 'What is the weather in Paris?' }),
  })
  const run = (await response.json()) as { id?: string; status?: string }
  if (response.status !== 201 || run.status !== 'completed' || !run.id)
    throw new Error(`the reference run answered ${response.status} ${run.status}`)
  return run.id
}

/** The routes starting at a different one each round, so none always goes first. */
function rotate<T>(items: readonly T[], by: number): T[] {
  const start = by % items.length
  return [...items.slice(start), ...items.slice(0, start)]
}

function paired(values: Record<Route, number[]>): Record<Route, number> {
  return Object.fromEntries(
    routes.map((route) => [
      route,
      summarize(values[route].map((value, index) => value - (values.native[index] ?? Number.NaN))).p50,
    ]),
  ) as Record<Route, number>
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
      route === 'native'
        ? ''
        : `${ms(result.pairedTotal[route])} (${percent(result.total.native.p50 + result.pairedTotal[route], result.total.native.p50)})`,
      ms(result.ttft[route].p50),
      route === 'native' ? '' : ms(result.pairedTtft[route]),
      result.pacedTtft ? ms(result.pacedTtft[route].p50) : 'n/a',
      result.pairedPacedTtft && route !== 'native' ? ms(result.pairedPacedTtft[route]) : '',
      result.cpuMs ? ms(result.cpuMs[route]) : 'n/a',
      result.cpuMs && route !== 'native' ? percent(result.cpuMs[route], result.cpuMs.native) : '',
    ]),
  )
  return [
    table(
      [
        'agent round (ms)',
        'round p50',
        'p95',
        'Δ native',
        'first text p50',
        'Δ native',
        'paced first text p50',
        'Δ native',
        'server cpu',
        'Δ native',
      ],
      rows,
    ),
    ...results.flatMap(({ engine, mapping }) => [
      `  ${engine}: in process, per round of ${mapping.events} log events → ${mapping.agUiEvents} AG-UI events: input check ${mapping.inputUs.toFixed(0)} µs, mapping + encoding ${mapping.mapEncodeUs.toFixed(0)} µs`,
      `  ${engine}: in process, per round of ${mapping.events} log events → ${mapping.uiChunks} UI message parts: request check ${mapping.uiInputUs.toFixed(0)} µs, mapping + framing ${mapping.uiMapEncodeUs.toFixed(0)} µs`,
    ]),
    ...skipped,
    '  native: POST /runs with Accept: text/event-stream; native GET: POST /runs, then GET /api/runs/:id/events; AG-UI: POST /ag-ui (RunAgentInput);',
    '  UI stream: POST /ui-stream (useChat body), read to data: [DONE];',
    '  first text = request sent → first message.delta / TEXT_MESSAGE_CONTENT / text-delta; paced: the answer streams 20 chunks 10 ms apart;',
    '  Δ native = median of the per-round differences from the native round measured next to it; server cpu = CPU ms of the Plinth process per round;',
    '  targets: AG-UI and UI stream first text within 1 ms of native, round within 10 % of native',
  ].join('\n')
}
