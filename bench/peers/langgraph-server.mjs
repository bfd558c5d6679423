// LangGraph.js's own API server (`@langchain/langgraph-api`, what `langgraphjs dev` runs): in memory,
// the only store its open-source JS server has (written to `<DATA_DIR>/.langgraph_api` after 3 s of
// quiet). Env: UPSTREAM_URL, DATA_DIR (a fresh directory per run).
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { startServer } from '@langchain/langgraph-api/server'
import { announce, freePort } from './serve-stats.mjs'

const port = await freePort()
await startServer({
  port,
  nWorkers: 1,
  host: '127.0.0.1',
  cwd: process.env.DATA_DIR,
  graphs: { agent: `${join(dirname(fileURLToPath(import.meta.url)), 'langgraph-graph.mjs')}:graph` },
})
await announce(`http://127.0.0.1:${port}`)
