/**
 * Audited dispatch throughput against a baseline (`BENCH_ONLY=baseline BENCH_BASELINE=<checkout>
 * BENCH_BASELINE_TARGET=dispatch npm run bench`): `POST /api/commands/rdm.ping` through a server of
 * another checkout and through this one, both running, loaded in turn (AB, BA, …) so the machine's
 * drift falls on both; the ratio of each pair is what a change does to the dispatch.
 */
import { measure, loadSettingsFromEnv } from '../lib/measure.js'
import { createTempDatabase } from '../lib/resources.js'
import { request } from './plinth-dispatch.js'
import { startPlinth } from './plinth-projects.js'

type Server = Awaited<ReturnType<typeof startPlinth>>

async function startBoth(
  adminUrl: string | undefined,
  root: string,
): Promise<{ servers: Server[]; stop(): Promise<void> }> {
  const cleanups: Array<() => Promise<void>> = []
  const servers: Server[] = []
  try {
    for (const from of [root, undefined]) {
      const database = adminUrl ? await createTempDatabase(adminUrl) : undefined
      if (database) cleanups.push(() => database.drop())
      const server = await startPlinth(database?.url, {}, from)
      cleanups.push(() => server.stop())
      servers.push(server)
    }
  } catch (error) {
    for (const cleanup of cleanups.reverse()) await cleanup()
    throw error
  }
  return {
    servers,
    stop: async () => {
      for (const cleanup of cleanups.reverse()) await cleanup()
    },
  }
}

export async function runDispatchBaseline(adminUrl: string | undefined, root: string): Promise<void> {
  const settings = { ...loadSettingsFromEnv(), warmupSeconds: 0 }
  const pairs = Number(process.env.BENCH_PAIRS ?? 5)
  console.log(
    `dispatch baseline bench: ${pairs} pairs of ${settings.durationSeconds} s, ${settings.connections} connections; baseline ${root}`,
  )
  for (const engine of adminUrl ? (['pglite', 'pg'] as const) : (['pglite'] as const)) {
    const { servers, stop } = await startBoth(engine === 'pg' ? adminUrl : undefined, root)
    try {
      const requests = servers.map((server) => request(server, 'dispatch').request)
      // Warm both (JIT, pools, prepared statements) before anything counts.
      for (const load of requests) await measure(load, { ...settings, durationSeconds: 2 })
      const ratios: number[] = []
      for (let pair = 0; pair < pairs; pair++) {
        const order = pair % 2 === 0 ? [0, 1] : [1, 0]
        const rates: number[] = []
        const p50s: number[] = []
        for (const index of order) {
          const result = await measure(requests[index]!, settings)
          if (result.non2xx > 0 || result.errors > 0)
            throw new Error(`${engine}: ${result.non2xx} non-2xx answers and ${result.errors} errors`)
          rates[index] = result.requestsPerSecond
          p50s[index] = result.latencyP50Ms
        }
        ratios.push(rates[1]! / rates[0]!)
        console.log(
          `  ${engine} pair ${pair + 1}: baseline ${rates[0]!.toFixed(0)}/s (p50 ${p50s[0]} ms), this checkout ${rates[1]!.toFixed(0)}/s (p50 ${p50s[1]} ms): ${ratios.at(-1)!.toFixed(2)}×`,
        )
      }
      const sorted = [...ratios].sort((a, b) => a - b)
      console.log(
        `  ${engine}: median ratio ${sorted[Math.floor(sorted.length / 2)]!.toFixed(2)}× (this checkout / baseline)`,
      )
    } finally {
      await stop()
    }
  }
}
