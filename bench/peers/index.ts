/**
 * `BENCH_ONLY=peers npm run bench`: the agent round (bench/agent/agent-round.ts: the model calls
 * get_weather, the tool answers, the model answers, streamed) through Plinth and through the peers'
 * own servers over HTTP — LangGraph.js's API server (in memory, the only store its open-source JS
 * server has) and Mastra's server (without storage, and with its memory on Postgres) — against the same
 * instant fake OpenAI upstream, with raw fetch, all started at once and interleaved round by round so
 * the machine's noise falls on every one alike. Reports p50/p95, the overhead over raw fetch, and the
 * server's CPU time per round (each server's own process, read the same way).
 *
 * The peers are not Plinth's dependencies: they are installed on demand into bench/peers/node_modules
 * from bench/peers/package-lock.json (about 370 MB; `npm ci` there, once). Not part of the default
 * `npm run bench`. Env: BENCH_ROUNDS (200), BENCH_AGENT_WARMUP (20); pg with TEST_DATABASE_URL.
 */
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { startChildServer, type ChildServer } from '../lib/child-server.js'
import { createTempDatabase, createTempDir } from '../lib/resources.js'
import { plinthRound, rawRound, roundInput } from '../agent/agent-round.js'
import { createConversations, loadAgentSettings, startPlinthAgent } from '../agent/index.js'
import { readEventStream } from '../agent/sse.js'
import { ms, summarize, table } from '../agent/stats.js'

const peersDir = fileURLToPath(new URL('.', import.meta.url))

interface Target {
  name: string
  /** One round; resolves with its time once the stream has ended, after checking the answer. */
  round(index: number): Promise<number>
  cpuMs(): Promise<number>
  stop(): Promise<void>
}

export async function runPeersBench(adminUrl: string | undefined): Promise<void> {
  const { rounds, warmup } = loadAgentSettings()
  await installPeers()
  console.log(
    `peers bench: the agent round through Plinth, LangGraph.js's server and Mastra's server, ${rounds} rounds after ${warmup} warm-up, interleaved with raw fetch`,
  )
  const upstream = await startChildServer('bench/servers/fake-openai-server.ts')
  const targets: Target[] = []
  const databases: Array<{ drop(): Promise<void> }> = []
  const database = async () => {
    const created = await createTempDatabase(adminUrl!)
    databases.push(created)
    return created.url
  }
  try {
    targets.push(await plinthTarget('Plinth (PGlite)', upstream.url, undefined, warmup + rounds))
    if (adminUrl) targets.push(await plinthTarget('Plinth (pg)', upstream.url, await database(), warmup + rounds))
    targets.push(await langGraphTarget(upstream.url, warmup + rounds))
    targets.push(await mastraTarget('Mastra (no storage)', upstream.url, undefined))
    if (adminUrl) targets.push(await mastraTarget('Mastra (memory on pg)', upstream.url, await database()))
    const times = new Map<string, number[]>(targets.map((target) => [target.name, []]))
    // CPU is read around each server's own rounds only: what it spends while the others run (timers,
    // a queue's polling) would otherwise count against it in proportion to the others' slowness.
    const cpu = new Map<string, number>(targets.map((target) => [target.name, 0]))
    const raw: number[] = []
    for (let round = 0; round < warmup + rounds; round++) {
      // The order turns each round, so no server always follows the same one.
      const order = targets.map((_, index) => targets[(index + round) % targets.length]!)
      for (const target of order) {
        const before = await target.cpuMs()
        const time = await target.round(round)
        const spent = (await target.cpuMs()) - before
        if (round < warmup) continue
        times.get(target.name)!.push(time)
        cpu.set(target.name, cpu.get(target.name)! + spent)
      }
      const rawTime = (await rawRound(upstream.url)).totalMs
      if (round >= warmup) raw.push(rawTime)
    }
    const rawSummary = summarize(raw)
    const rows: string[][] = []
    for (const target of targets) {
      const summary = summarize(times.get(target.name)!)
      const cpuPerRound = cpu.get(target.name)! / rounds
      rows.push([target.name, ms(summary.p50), ms(summary.p95), ms(summary.p50 - rawSummary.p50), ms(cpuPerRound)])
    }
    rows.push(['raw fetch', ms(rawSummary.p50), ms(rawSummary.p95), '0', ''])
    console.log(table(['agent round', 'p50 ms', 'p95 ms', 'overhead p50 ms', 'server CPU ms/round'], rows))
    console.log(
      "  Plinth writes each step (run, messages, ledger, audit, events) before announcing it; LangGraph's JS server keeps threads and\n" +
        '  checkpoints in memory and runs each run from a queue it polls every 0–1 s; Mastra without storage keeps nothing, with pg it\n' +
        "  stores the thread's messages. Server CPU is the server process alone (PGlite runs inside Plinth's; Postgres is outside).",
    )
  } finally {
    for (const target of targets) await target.stop().catch(() => undefined)
    await upstream.stop()
    for (const created of databases) await created.drop().catch(() => undefined)
  }
}

/** `npm ci` in bench/peers when its node_modules is missing. */
async function installPeers(): Promise<void> {
  if (
    existsSync(`${peersDir}node_modules/@mastra/core`) &&
    existsSync(`${peersDir}node_modules/@langchain/langgraph-api`)
  )
    return
  console.log('peers bench: installing the peer servers into bench/peers/node_modules (npm ci, once)…')
  await new Promise<void>((resolve, reject) => {
    const child = spawn('npm', ['ci', '--no-audit', '--no-fund'], {
      cwd: peersDir,
      stdio: ['ignore', 'ignore', 'inherit'],
    })
    child.once('error', reject)
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`npm ci in bench/peers exited ${code}`))))
  })
}

async function plinthTarget(name: string, upstreamUrl: string, databaseUrl: string | undefined, count: number) {
  const plinth = await startPlinthAgent(upstreamUrl, databaseUrl)
  const conversations = await createConversations(plinth.target, plinth.projectId, count)
  return {
    name,
    round: async (index: number) => (await plinthRound(plinth.target, conversations[index]!)).totalMs,
    cpuMs: async () => (await plinth.stats()).cpuMs,
    stop: () => plinth.stop(),
  } satisfies Target
}

/** A peer server started from bench/peers with the bench's upstream. */
async function startPeer(
  script: string,
  env: Record<string, string>,
): Promise<ChildServer & { cpuMs(): Promise<number> }> {
  const server = await startChildServer(`bench/peers/${script}`, { env, readyTimeoutMs: 120_000 })
  const statsUrl = server.info.statsUrl
  if (typeof statsUrl !== 'string') {
    await server.stop()
    throw new Error(`${script} did not report a stats URL`)
  }
  return { ...server, cpuMs: async () => ((await (await fetch(statsUrl)).json()) as { cpuMs: number }).cpuMs }
}

/** LangGraph's API: a thread per round, then `POST /threads/:id/runs/stream` with the model's tokens streamed. */
async function langGraphTarget(upstreamUrl: string, count: number): Promise<Target> {
  const dataDir = await createTempDir('plinth-bench-langgraph-')
  const server = await startPeer('langgraph-server.mjs', { UPSTREAM_URL: upstreamUrl, DATA_DIR: dataDir.path })
  const threads: string[] = []
  for (let index = 0; index < count; index++) {
    const response = await fetch(`${server.url}/threads`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    })
    threads.push(((await response.json()) as { thread_id: string }).thread_id)
  }
  return {
    name: 'LangGraph.js server (in memory)',
    round: async (index) => {
      const started = performance.now()
      const response = await fetch(`${server.url}/threads/${threads[index]}/runs/stream`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          assistant_id: 'agent',
          input: { messages: [{ role: 'user', content: roundInput }] },
          stream_mode: ['messages-tuple'],
        }),
      })
      if (response.status !== 200) throw new Error(`LangGraph answered ${response.status}`)
      let text = ''
      await readEventStream(response.body, (event) => {
        if (!event.event?.startsWith('messages')) return
        const [chunk] = JSON.parse(event.data) as [{ type?: string; content?: unknown }]
        if ((chunk.type === 'AIMessageChunk' || chunk.type === 'ai') && typeof chunk.content === 'string')
          text += chunk.content
      })
      const ended = performance.now()
      if (!text.includes('It is 21'))
        throw new Error(`LangGraph: unexpected answer ${JSON.stringify(text.slice(0, 200))}`)
      return ended - started
    },
    cpuMs: () => server.cpuMs(),
    stop: async () => {
      await server.stop()
      await dataDir.remove()
    },
  }
}

/** Mastra's `POST /api/agents/:id/stream`; with storage, a thread of its memory per round. */
async function mastraTarget(name: string, upstreamUrl: string, databaseUrl: string | undefined): Promise<Target> {
  const server = await startPeer('mastra-server.mjs', {
    UPSTREAM_URL: upstreamUrl,
    // Its usage reports would go to an outside host, which this machine cannot reach (and must not).
    MASTRA_TELEMETRY_DISABLED: '1',
    ...(databaseUrl && { DATABASE_URL: databaseUrl }),
  })
  return {
    name,
    round: async (index) => {
      const started = performance.now()
      const response = await fetch(`${server.url}/api/agents/agent/stream`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          messages: [{ role: 'user', content: roundInput }],
          ...(databaseUrl && { memory: { thread: `bench-${index}`, resource: 'bench' } }),
        }),
      })
      if (response.status !== 200) throw new Error(`Mastra answered ${response.status}`)
      let text = ''
      await readEventStream(response.body, (event) => {
        if (event.data === '[DONE]') return
        const chunk = JSON.parse(event.data) as { type?: string; payload?: { text?: unknown } }
        if (chunk.type === 'text-delta' && typeof chunk.payload?.text === 'string') text += chunk.payload.text
      })
      const ended = performance.now()
      if (!text.includes('It is 21')) throw new Error(`Mastra: unexpected answer ${JSON.stringify(text.slice(0, 200))}`)
      return ended - started
    },
    cpuMs: () => server.cpuMs(),
    stop: () => server.stop(),
  }
}
