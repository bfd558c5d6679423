/**
 * `npm run bench`: requests/s of authenticated `GET /api/projects`, and of a no-op command dispatch
 * next to `GET /api/me`, beside a Fastify hello-world measured in the same run, on PGlite and (with
 * TEST_DATABASE_URL or BENCH_DATABASE_URL) on pg; then the agent-round bench (bench/agent/index.ts);
 * then the retrieval bench (bench/retrieval/index.ts), the exec bench (bench/exec/index.ts) and the MCP
 * benches (bench/mcp: /mcp beside /api, and a mounted MCP tool beside the SDK client); then the
 * frontend-routes bench (bench/ag-ui: POST /api/conversations/:id/ag-ui and …/ui-stream, the AI SDK's
 * UI message stream, beside the native run stream), the webhook bench (bench/webhooks: commit →
 * delivery latency, and what the outbox adds to an event's insert) and the schedule bench
 * (bench/schedules: 1,000 schedules firing each minute across two instances sharing pg), and the tracing
 * bench (bench/agent/tracing.ts: the agent round with OpenTelemetry off and on, beside raw fetch), and the
 * budget bench (bench/agent/budgets.ts: the agent round without and with run and project budgets), and the
 * start bench (bench/start: time to ready, idle RSS, CLI latency, beside their targets).
 * Each server runs in its own process; autocannon loads it from this one.
 *
 * Env: BENCH_ONLY (`http`, `agent`, `rag`, `exec`, `mcp`, `frontends`, `webhooks`, `schedules`, `tracing`, `budgets` or `start`: run one
 * part; `peers`, the agent round through LangGraph.js's and Mastra's servers beside Plinth (bench/peers), and `baseline`, the
 * round through another checkout's server (BENCH_BASELINE=<dir>) beside this one's (bench/agent/baseline.ts; with
 * BENCH_BASELINE_TARGET=dispatch, audited dispatch throughput in pairs, BENCH_PAIRS), and `floor`, the round through a
 * server that makes only its I/O (bench/agent/floor.ts), run only when asked for; `ag-ui` is the older name of `frontends`, and runs the same part), BENCH_DURATION (s, default 8),
 * BENCH_WARMUP (s, 2), BENCH_CONNECTIONS (10), BENCH_PIPELINING (1); the agent bench's own settings are in
 * bench/agent/index.ts.
 */
import { cpus } from 'node:os'
import { loadAgentSettings, runAgentBench } from './agent/index.js'
import { runExecBench } from './exec/index.js'
import { runMcpBench } from './mcp/index.js'
import { runFrontendsBench } from './ag-ui/index.js'
import { runRetrievalBench } from './retrieval/index.js'
import { runWebhookBench } from './webhooks/index.js'
import { runScheduleBench } from './schedules/index.js'
import { runBudgetBench } from './agent/budgets.js'
import { baselineRoot, runBaselineBench } from './agent/baseline.js'
import { runTracingBench } from './agent/tracing.js'
import { runFloorBench } from './agent/floor.js'
import { runStartBench } from './start/index.js'
import { runPeersBench } from './peers/index.js'
import { cleanupAll, cleanupOnSignals } from './lib/cleanup.js'
import { loadSettingsFromEnv } from './lib/measure.js'
import { formatTable, runScenarios, type Scenario } from './lib/scenario.js'
import { helloWorldScenario } from './scenarios/hello-world.js'
import { dispatchScenarios } from './scenarios/plinth-dispatch.js'
import { plinthProjectsOnPg, plinthProjectsOnPGlite } from './scenarios/plinth-projects.js'

cleanupOnSignals()

const databaseUrl = process.env.BENCH_DATABASE_URL || process.env.TEST_DATABASE_URL || undefined
// `ag-ui` named the frontend-routes part before it measured the UI message stream too.
const only = process.env.BENCH_ONLY === 'ag-ui' ? 'frontends' : process.env.BENCH_ONLY || undefined
if (
  only !== undefined &&
  ![
    'http',
    'agent',
    'rag',
    'exec',
    'mcp',
    'frontends',
    'webhooks',
    'schedules',
    'tracing',
    'budgets',
    'start',
    'peers',
    'baseline',
    'floor',
  ].includes(only)
) {
  console.error(
    `BENCH_ONLY must be "http", "agent", "rag", "exec", "mcp", "frontends" (or "ag-ui"), "webhooks", "schedules", "tracing", "budgets", "start", "peers", "baseline" or "floor", got ${JSON.stringify(process.env.BENCH_ONLY)}`,
  )
  process.exit(2)
}

/** Requests/s of plain routes under autocannon load. Returns false when the bench itself is broken. */
async function runHttpBench(): Promise<boolean> {
  const settings = loadSettingsFromEnv()
  // Hello-world first: it is the yardstick for everything after it.
  const scenarios: Scenario[] = [
    helloWorldScenario(),
    plinthProjectsOnPGlite(),
    plinthProjectsOnPg(databaseUrl),
    ...dispatchScenarios(databaseUrl),
  ]
  console.log(
    `plinth bench: node ${process.version}, ${cpus().length} cpus; ${settings.connections} connections, ` +
      `pipelining ${settings.pipelining}, ${settings.warmupSeconds}s warm-up + ${settings.durationSeconds}s per target`,
  )
  const results = await runScenarios(scenarios, settings, (result) => {
    if ('skipped' in result) console.log(`  ${result.name}: skipped (${result.skipped})`)
    else console.log(`  ${result.name}: ${result.requestsPerSecond.toFixed(0)} req/s`)
  })
  console.log(`\n${formatTable(results)}`)
  // The target for the audited dispatch, beside the figure (docs/reference/benchmarks.md).
  const audited = results.find((result) => result.name === 'plinth POST /api/commands/rdm.ping (pg)')
  if (audited && !('skipped' in audited)) {
    const rate = audited.requestsPerSecond
    console.log(
      `\ntarget: audited rdm.ping on pg with synchronous commit ≥ 1,000 req/s: ${rate.toFixed(0)} req/s (${rate >= 1000 ? 'met' : 'not met'} in this run)`,
    )
  }

  const broken = results.filter((result) => !('skipped' in result) && (result.non2xx > 0 || result.errors > 0))
  if (broken.length > 0) {
    console.error(
      `\nbench is broken: non-2xx responses or connection errors in ${broken.map((result) => result.name).join(', ')}`,
    )
    return false
  }
  return true
}

try {
  // Settings are checked before anything starts.
  const agentSettings = only === undefined || only === 'agent' ? loadAgentSettings() : undefined
  if (only === undefined || only === 'http') {
    if (!(await runHttpBench())) process.exitCode = 1
  }
  if (agentSettings) {
    if (only === undefined) console.log('')
    await runAgentBench(databaseUrl, agentSettings)
  }
  if (only === undefined || only === 'rag') {
    if (only === undefined) console.log('')
    await runRetrievalBench(databaseUrl)
  }
  if (only === undefined || only === 'exec') {
    if (only === undefined) console.log('')
    await runExecBench()
  }
  if (only === undefined || only === 'mcp') {
    if (only === undefined) console.log('')
    await runMcpBench(databaseUrl)
  }
  if (only === undefined || only === 'frontends') {
    if (only === undefined) console.log('')
    await runFrontendsBench(databaseUrl)
  }
  if (only === undefined || only === 'webhooks') {
    if (only === undefined) console.log('')
    await runWebhookBench(databaseUrl)
  }
  if (only === undefined || only === 'schedules') {
    if (only === undefined) console.log('')
    await runScheduleBench(databaseUrl)
  }
  if (only === undefined || only === 'tracing') {
    if (only === undefined) console.log('')
    await runTracingBench(databaseUrl)
  }
  if (only === undefined || only === 'budgets') {
    if (only === undefined) console.log('')
    await runBudgetBench(databaseUrl)
  }
  if (only === undefined || only === 'start') {
    if (only === undefined) console.log('')
    await runStartBench(databaseUrl)
  }
  // Opt-in only: it installs the peers' servers (bench/peers/package.json) on first use.
  if (only === 'peers') await runPeersBench(databaseUrl)
  if (only === 'baseline') await runBaselineBench(databaseUrl, baselineRoot())
  if (only === 'floor') await runFloorBench(databaseUrl)
} catch (error) {
  console.error(error)
  process.exitCode = 1
} finally {
  await cleanupAll()
}
