/**
 * The MCP server bench (part of `BENCH_ONLY=mcp npm run bench`): `tools/call` of `rdm__ping` through `POST /mcp`
 * beside `POST /api/commands/rdm.ping` (entrance button) on the same server, interleaved call by call
 * so both see the same machine: p50/p95 of each and the ratio MCP ÷ API (goal: ≤ 1.5×). Measured
 * one call at a time and with several in flight, on PGlite and (with a database URL) on pg.
 *
 * Env: BENCH_MCP_CALLS (per target and mode, default 400, after 50 warm-up), BENCH_MCP_CONCURRENCY (8).
 */
import { createTempDatabase } from '../lib/resources.js'
import { ms, summarize, table } from '../agent/stats.js'
import { startPlinth } from '../scenarios/plinth-projects.js'

type Call = () => Promise<void>

export async function runMcpServerBench(databaseUrl: string | undefined): Promise<void> {
  const calls = Number(process.env.BENCH_MCP_CALLS ?? 400)
  const concurrency = Number(process.env.BENCH_MCP_CONCURRENCY ?? 8)
  console.log(
    `mcp bench: ${calls} calls per target and mode after 50 warm-up, MCP and API interleaved; concurrency ${concurrency} in the second mode`,
  )
  const rows: string[][] = []
  for (const engine of ['PGlite', 'pg'] as const) {
    if (engine === 'pg' && !databaseUrl) {
      console.log('  pg: skipped (set TEST_DATABASE_URL or BENCH_DATABASE_URL)')
      continue
    }
    const database = engine === 'pg' ? await createTempDatabase(databaseUrl!) : undefined
    try {
      const server = await startPlinth(database?.url)
      try {
        const targets = { mcp: mcpCall(server), api: apiCall(server) }
        for (const [mode, inFlight] of [
          ['1 at a time', 1],
          [`${concurrency} in flight`, concurrency],
        ] as const) {
          const timings = await interleaved(targets, calls, inFlight)
          const mcp = summarize(timings.mcp)
          const api = summarize(timings.api)
          rows.push([
            `${engine}, ${mode}`,
            ms(api.p50),
            ms(api.p95),
            ms(mcp.p50),
            ms(mcp.p95),
            `${(mcp.p50 / api.p50).toFixed(2)}×`,
            `${(mcp.p95 / api.p95).toFixed(2)}×`,
          ])
        }
      } finally {
        await server.stop()
      }
    } finally {
      await database?.drop()
    }
  }
  console.log(table(['rdm.ping (ms)', 'API p50', 'p95', 'MCP p50', 'p95', 'ratio p50', 'ratio p95'], rows))
  console.log(
    '  API: POST /api/commands/rdm.ping {entrance: button}; MCP: POST /mcp tools/call rdm__ping (stateless: a server and transport per request); goal: ratio ≤ 1.5×',
  )
}

/** `inFlight` workers, each alternating the two targets, until each has `calls` timings (after warm-up). */
async function interleaved(
  targets: { mcp: Call; api: Call },
  calls: number,
  inFlight: number,
): Promise<{ mcp: number[]; api: number[] }> {
  const timings = { mcp: [] as number[], api: [] as number[] }
  const warmup = 50
  let started = 0
  const worker = async (offset: number): Promise<void> => {
    for (let index = started++; index < warmup + calls; index = started++) {
      const order = (index + offset) % 2 === 0 ? (['mcp', 'api'] as const) : (['api', 'mcp'] as const)
      for (const name of order) {
        const begin = performance.now()
        await targets[name]()
        if (index >= warmup) timings[name].push(performance.now() - begin)
      }
    }
  }
  await Promise.all(Array.from({ length: inFlight }, (_, offset) => worker(offset)))
  return timings
}

function mcpCall(server: { url: string; token: string }): Call {
  const headers = {
    authorization: `Bearer ${server.token}`,
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': '2025-06-18',
  }
  let id = 0
  return async () => {
    const response = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: ++id,
        method: 'tools/call',
        params: { name: 'rdm__ping', arguments: { target: 'bench' } },
      }),
    })
    const text = await response.text()
    if (response.status !== 200 || !text.includes('"pong":true'))
      throw new Error(`MCP tools/call answered ${response.status}: ${text.slice(0, 200)}`)
  }
}

function apiCall(server: { url: string; token: string }): Call {
  const headers = { authorization: `Bearer ${server.token}`, 'content-type': 'application/json' }
  const body = JSON.stringify({ entrance: 'button', params: { target: 'bench' } })
  return async () => {
    const response = await fetch(`${server.url}/api/commands/rdm.ping`, { method: 'POST', headers, body })
    const text = await response.text()
    if (response.status !== 200 || !text.includes('"succeeded"'))
      throw new Error(`dispatch answered ${response.status}: ${text.slice(0, 200)}`)
  }
}
