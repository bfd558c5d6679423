/**
 * The tracing bench (`BENCH_ONLY=tracing npm run bench`): the agent round (bench/agent/agent-round.ts)
 * through two Plinth processes at once — one without OpenTelemetry, one exporting its spans and
 * metrics over OTLP/HTTP (protobuf, the default) to a receiver in this process — and raw fetch,
 * interleaved round by round so the machine's noise falls on all three alike. On pg when a database is
 * given (one fresh database each), else on PGlite.
 *
 * Env: BENCH_ROUNDS (200), BENCH_AGENT_WARMUP (20).
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { startChildServer } from '../lib/child-server.js'
import { createTempDatabase } from '../lib/resources.js'
import { plinthRound, rawRound } from './agent-round.js'
import { createConversations, loadAgentSettings, startPlinthAgent } from './index.js'
import { ms, summarize, table } from './stats.js'

export async function runTracingBench(adminUrl: string | undefined): Promise<void> {
  const { rounds, warmup } = loadAgentSettings()
  let requests = 0
  let bytes = 0
  const receiver = createServer((request, response) => {
    requests++
    request.on('data', (chunk: Buffer) => (bytes += chunk.length))
    request.on('end', () => response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end())
  })
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
  const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`
  const databases = adminUrl ? [await createTempDatabase(adminUrl), await createTempDatabase(adminUrl)] : []
  const engine = adminUrl ? 'pg' : 'PGlite'
  console.log(
    `tracing bench (${engine}): ${rounds} rounds after ${warmup} warm-up; tracing off, tracing on (OTLP to a local receiver) and raw fetch, interleaved`,
  )
  const upstream = await startChildServer('bench/servers/fake-openai-server.ts')
  try {
    const off = await startPlinthAgent(upstream.url, databases[0]?.url)
    const on = await startPlinthAgent(upstream.url, databases[1]?.url, {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiverUrl,
      OTEL_METRIC_EXPORT_INTERVAL: '5000',
    })
    try {
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
      const offAfter = await off.stats()
      const onAfter = await on.stats()
      const offSummary = summarize(times.off)
      const onSummary = summarize(times.on)
      const rawSummary = summarize(times.raw)
      const cpu = (after: { cpuMs: number }, before: { cpuMs: number }) => (after.cpuMs - before.cpuMs) / rounds
      console.log(
        table(
          ['round', 'p50 ms', 'p95 ms', 'overhead p50 ms', 'server CPU ms/round'],
          [
            [
              'tracing off',
              ms(offSummary.p50),
              ms(offSummary.p95),
              ms(offSummary.p50 - rawSummary.p50),
              ms(cpu(offAfter, offBefore)),
            ],
            [
              'tracing on',
              ms(onSummary.p50),
              ms(onSummary.p95),
              ms(onSummary.p50 - rawSummary.p50),
              ms(cpu(onAfter, onBefore)),
            ],
            ['raw fetch', ms(rawSummary.p50), ms(rawSummary.p95), '', ''],
          ],
        ),
      )
      console.log(
        `  tracing adds ${ms(onSummary.p50 - offSummary.p50)} ms to the round's p50 (target ≤ 1 ms) and ` +
          `${ms(cpu(onAfter, onBefore) - cpu(offAfter, offBefore))} ms of server CPU; ` +
          `the receiver got ${requests} exports, ${(bytes / 1024).toFixed(0)} KiB`,
      )
    } finally {
      await off.stop()
      await on.stop()
    }
  } finally {
    await upstream.stop()
    for (const database of databases) await database.drop()
    await new Promise<void>((resolve) => receiver.close(() => resolve()))
  }
}
