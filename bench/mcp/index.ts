/**
 * The MCP benches (`BENCH_ONLY=mcp npm run bench`): Plinth as an MCP server (`/mcp` beside `/api`,
 * bench/mcp/server.ts), then as a client (a mounted stdio tool through the bus beside the SDK client
 * calling the same server, bench/mcp/client.ts).
 */
import { runMcpClientBench } from './client.js'
import { runMcpServerBench } from './server.js'

export async function runMcpBench(databaseUrl: string | undefined): Promise<void> {
  await runMcpServerBench(databaseUrl)
  console.log('')
  await runMcpClientBench(databaseUrl)
}
