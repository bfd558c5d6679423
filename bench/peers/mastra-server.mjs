// Mastra's server (`@mastra/deployer`'s Node server, what `mastra dev` runs) with one agent and the
// bench's tool. With DATABASE_URL its memory is on Postgres (`@mastra/pg`), else there is no storage.
// Env: UPSTREAM_URL, DATABASE_URL.
import { createOpenAI } from '@ai-sdk/openai'
import { Agent } from '@mastra/core/agent'
import { Mastra } from '@mastra/core/mastra'
import { createTool } from '@mastra/core/tools'
import { createNodeServer } from '@mastra/deployer/server'
import { z } from 'zod'
import { announce, freePort } from './serve-stats.mjs'

const openai = createOpenAI({ baseURL: process.env.UPSTREAM_URL, apiKey: 'bench' })
const weather = createTool({
  id: 'get_weather',
  description: 'The current weather in a city.',
  inputSchema: z.object({ city: z.string().min(1).max(100) }),
  execute: async (input) => ({ city: input.city, tempC: 21, sky: 'clear' }),
})
let storage
let memory
if (process.env.DATABASE_URL) {
  const { PostgresStore } = await import('@mastra/pg')
  const { Memory } = await import('@mastra/memory')
  storage = new PostgresStore({ id: 'bench', connectionString: process.env.DATABASE_URL })
  memory = new Memory({ storage, options: { lastMessages: 40 } })
}
const agent = new Agent({
  id: 'agent',
  name: 'agent',
  instructions: 'You are an agent. Answer concisely.',
  model: openai.chat('m'),
  tools: { get_weather: weather },
  ...(memory && { memory }),
})
const port = await freePort()
const mastra = new Mastra({
  agents: { agent },
  ...(storage && { storage }),
  server: { port, host: '127.0.0.1' },
  logger: false,
})
await createNodeServer(mastra, { tools: {} })
await announce(`http://127.0.0.1:${port}`)
