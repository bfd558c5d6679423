/**
 * The MCP client bench (part of `BENCH_ONLY=mcp npm run bench`): p50/p95 of one `tools/call` of a stdio MCP
 * server's echo tool made with the SDK client directly, beside the same call as a mounted command
 * through the bus (`bus.dispatch`: validation, gate, the audit envelope in the database), interleaved
 * in one run, on PGlite and (with a database URL) on pg. The difference is what mounting costs; an
 * audited no-op plugin command (`rdm.ping`) beside them shows how much of it is the bus itself.
 *
 * Env: BENCH_MCP_CALLS (default 500, after 50 warm-up).
 */
import { fileURLToPath } from 'node:url'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { pino } from 'pino'
import { setUpCommandBus } from '../../src/app/index.js'
import { HashingEmbedder, prepareEmbeddings } from '../../src/rag/index.js'
import { createUser, openStore, type Store } from '../../src/store/index.js'
import { ms, summarize, table } from '../agent/stats.js'
import { createTempDatabase, createTempDir } from '../lib/resources.js'

const toy = fileURLToPath(new URL('../../test/__fixtures__/mcp/toy-server.mjs', import.meta.url))

export async function runMcpClientBench(databaseUrl: string | undefined): Promise<void> {
  const calls = Number(process.env.BENCH_MCP_CALLS ?? 500)
  console.log(
    `MCP client bench: ${calls} echo calls per path after 50 warm-up, interleaved; stdio server ${toy.split('/').slice(-3).join('/')}`,
  )
  const rows: string[][] = []
  for (const engine of databaseUrl ? (['PGlite', 'pg'] as const) : (['PGlite'] as const)) {
    const temp = engine === 'pg' ? await createTempDatabase(databaseUrl!) : await createTempDir('plinth-bench-mcp-')
    const store: Store =
      engine === 'pg'
        ? await openStore({ databaseUrl: (temp as { url: string }).url, poolSize: 4 })
        : await openStore({ dataDir: (temp as { path: string }).path })
    const data = await createTempDir('plinth-bench-mcp-data-')
    const direct = new Client({ name: 'bench', version: '0' })
    let setup: Awaited<ReturnType<typeof setUpCommandBus>> | undefined
    try {
      const embedder = new HashingEmbedder()
      await prepareEmbeddings(store, embedder)
      setup = await setUpCommandBus(store, {
        plugins: ['rdm'],
        logger: pino({ level: 'silent' }),
        actionTtlMs: 3_600_000,
        allowanceTtlMs: 3_600_000,
        dataDir: data.path,
        embedder,
        mcpServers: [{ name: 'toy', transport: 'stdio', command: process.execPath, args: [toy] }],
      })
      await direct.connect(new StdioClientTransport({ command: process.execPath, args: [toy] }))
      const user = await createUser(store, 'bench')
      if ('error' in user) throw new Error('user')
      const bus = setup.bus
      const viaBus = async (index: number) => {
        const outcome = await bus.dispatch({
          commandId: 'mcp.toy.echo',
          params: { text: `n${index}` },
          entrance: 'button',
          actor: { type: 'user', id: user.id, onBehalfOf: user.id },
          projectId: null,
          conversationId: null,
          idempotencyKey: null,
        })
        if (outcome.status !== 'succeeded') throw new Error(`bus call ${outcome.status}`)
      }
      const viaSdk = async (index: number) => {
        await direct.callTool({ name: 'echo', arguments: { text: `n${index}` } })
      }
      const viaPing = async () => {
        const outcome = await bus.dispatch({
          commandId: 'rdm.ping',
          params: {},
          entrance: 'button',
          actor: { type: 'user', id: user.id, onBehalfOf: user.id },
          projectId: null,
          conversationId: null,
          idempotencyKey: null,
        })
        if (outcome.status !== 'succeeded') throw new Error(`ping ${outcome.status}`)
      }
      const timings = { sdk: [] as number[], bus: [] as number[], ping: [] as number[] }
      for (let index = 0; index < calls + 50; index++) {
        for (const [name, call] of [
          ['sdk', viaSdk],
          ['bus', viaBus],
          ['ping', viaPing],
        ] as const) {
          const started = performance.now()
          await call(index)
          if (index >= 50) timings[name].push(performance.now() - started)
        }
      }
      const sdk = summarize(timings.sdk)
      const bus50 = summarize(timings.bus)
      const ping = summarize(timings.ping)
      rows.push([engine, ms(sdk.p50), ms(sdk.p95), ms(bus50.p50), ms(bus50.p95), ms(bus50.p50 - sdk.p50), ms(ping.p50)])
    } finally {
      await direct.close().catch(() => undefined)
      await setup?.mcp.stop()
      await setup?.exec.stop()
      await store.close()
      await ('drop' in temp ? temp.drop() : temp.remove())
      await data.remove()
    }
  }
  console.log(table(['MCP echo (ms)', 'SDK p50', 'p95', 'bus p50', 'p95', 'overhead p50', 'rdm.ping p50'], rows))
}
