/**
 * The agent round (bench/agent/agent-round.ts) through two Plinth processes at once — a baseline and
 * one with a feature on — and raw fetch, interleaved round by round so the machine's noise falls on all
 * three alike: what the feature adds to a round. On pg when a database is given (one fresh database
 * each), else on PGlite. Used by the tracing and budget benches.
 *
 * Env: BENCH_ROUNDS (200), BENCH_AGENT_WARMUP (20).
 */
import { startChildServer } from '../lib/child-server.js'
import { createTempDatabase } from '../lib/resources.js'
import { plinthRound, rawRound, type PlinthTarget } from './agent-round.js'
import { createConversations, loadAgentSettings, startPlinthAgent } from './index.js'
import { ms, summarize, table } from './stats.js'

export interface PairedRoundBench {
  /** What is measured, for the headline. */
  title: string
  labels: { off: string; on: string }
  /** The environment of the server with the feature on. */
  onEnv: Record<string, string>
  /** The checkout the baseline server runs from (default: this one). */
  offRoot?: string
  /** The baseline's server script (default: bench/servers/plinth-agent-server.ts). */
  offScript?: string
  /** Prepares the server with the feature on (its project) before the rounds. */
  prepareOn?: (target: PlinthTarget, projectId: string) => Promise<void>
  /** The closing line, from the p50 and server CPU the feature adds. */
  verdict: (added: { p50Ms: number; cpuMs: number }) => string
}

export async function runPairedRoundBench(adminUrl: string | undefined, bench: PairedRoundBench): Promise<void> {
  const { rounds, warmup } = loadAgentSettings()
  const databases = adminUrl ? [await createTempDatabase(adminUrl), await createTempDatabase(adminUrl)] : []
  const engine = adminUrl ? 'pg' : 'PGlite'
  console.log(
    `${bench.title} (${engine}): ${rounds} rounds after ${warmup} warm-up; ${bench.labels.off}, ${bench.labels.on} and raw fetch, interleaved`,
  )
  const upstream = await startChildServer('bench/servers/fake-openai-server.ts')
  try {
    const off = await startPlinthAgent(upstream.url, databases[0]?.url, {}, bench.offRoot, bench.offScript)
    const on = await startPlinthAgent(upstream.url, databases[1]?.url, bench.onEnv)
    try {
      await bench.prepareOn?.(on.target, on.projectId)
      const offConversations = await createConversations(off.target, off.projectId, warmup + rounds)
      const onConversations = await createConversations(on.target, on.projectId, warmup + rounds)
      const times = { off: [] as number[], on: [] as number[], raw: [] as number[] }
      let offBefore = await off.stats()
      let onBefore = await on.stats()
      for (let round = 0; round < warmup + rounds; round++) {
        if (round === warmup) {
          offBefore = await off.stats()
          onBefore = await on.stats()
        }
        // The order turns each round, so neither server always follows the other.
        const order = round % 2 === 0 ? (['off', 'on'] as const) : (['on', 'off'] as const)
        const measured: Record<string, number> = {}
        for (const which of order) {
          const server = which === 'off' ? off : on
          const conversations = which === 'off' ? offConversations : onConversations
          measured[which] = (await plinthRound(server.target, conversations[round]!)).totalMs
        }
        const raw = (await rawRound(upstream.url)).totalMs
        if (round < warmup) continue
        times.off.push(measured.off!)
        times.on.push(measured.on!)
        times.raw.push(raw)
      }
      const cpu = (after: { cpuMs: number }, before: { cpuMs: number }) => (after.cpuMs - before.cpuMs) / rounds
      const offCpu = cpu(await off.stats(), offBefore)
      const onCpu = cpu(await on.stats(), onBefore)
      const offSummary = summarize(times.off)
      const onSummary = summarize(times.on)
      const rawSummary = summarize(times.raw)
      const row = (label: string, summary: typeof offSummary, cpuMs: number) => [
        label,
        ms(summary.p50),
        ms(summary.p95),
        ms(summary.p50 - rawSummary.p50),
        ms(cpuMs),
      ]
      console.log(
        table(
          ['round', 'p50 ms', 'p95 ms', 'overhead p50 ms', 'server CPU ms/round'],
          [
            row(bench.labels.off, offSummary, offCpu),
            row(bench.labels.on, onSummary, onCpu),
            ['raw fetch', ms(rawSummary.p50), ms(rawSummary.p95), '', ''],
          ],
        ),
      )
      console.log(`  ${bench.verdict({ p50Ms: onSummary.p50 - offSummary.p50, cpuMs: onCpu - offCpu })}`)
    } finally {
      await off.stop()
      await on.stop()
    }
  } finally {
    await upstream.stop()
    for (const database of databases) await database.drop()
  }
}
