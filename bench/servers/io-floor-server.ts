/**
 * The floor bench's server (`BENCH_ONLY=floor`): only the I/O of a Plinth agent round and none of its
 * logic, to say what the round's waits cost on this machine before any of Plinth's own work. It speaks
 * just enough of Plinth's API for the agent round's client (bench/agent/agent-round.ts): creating a
 * conversation, and `POST /api/conversations/:id/runs` answered as a stream of the events the client
 * checks. A round makes what Plinth's round makes (docs/reference/benchmarks.md, the round on Postgres):
 * eight statements one after another — an access read, six inserts of one event row each with its
 * commit, and a read for a queued run — and the two upstream calls through undici's `request`, their
 * streams parsed. No authentication, validation, transcript, command bus or audit.
 *
 * On DATABASE_URL's Postgres (a pool of 4), else an embedded PGlite in PLINTH_DATA_DIR; the ready line
 * and stats side port are the agent server's (bench/servers/plinth-agent-server.ts).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { PGlite } from '@electric-sql/pglite'
import pg from 'pg'
import { request } from 'undici'
import { announceReady, fail } from '../lib/child-side.js'

interface Database {
  query(sql: string, params?: unknown[]): Promise<unknown>
  close(): Promise<void>
}

async function openDatabase(): Promise<Database> {
  const url = process.env.DATABASE_URL
  if (url) {
    const pool = new pg.Pool({ connectionString: url, max: 4 })
    return { query: (sql, params) => pool.query(sql, params), close: () => pool.end() }
  }
  const dataDir = process.env.PLINTH_DATA_DIR
  if (!dataDir) throw new Error('PLINTH_DATA_DIR or DATABASE_URL must be set')
  const db = await PGlite.create(join(dataDir, 'pg'))
  return { query: (sql, params) => db.query(sql, params), close: () => db.close() }
}

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The current weather in a city.',
      parameters: { type: 'object', required: ['city'], properties: { city: { type: 'string' } } },
    },
  },
]

interface Turn {
  text: string
  callId: string
  args: string
}

/** One streamed chat-completions call, its server-sent events parsed into the answer or a tool call. */
async function modelCall(upstream: string, messages: object[]): Promise<Turn> {
  const response = await request(`${upstream}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ model: 'm', messages, stream: true, stream_options: { include_usage: true }, tools }),
  })
  const turn: Turn = { text: '', callId: '', args: '' }
  let buffered = ''
  for await (const chunk of response.body) {
    buffered += (chunk as Buffer).toString()
    let end: number
    while ((end = buffered.indexOf('\n\n')) >= 0) {
      const data = buffered.slice(0, end).replace(/^data: /, '')
      buffered = buffered.slice(end + 2)
      if (!data || data === '[DONE]') continue
      const delta = (
        JSON.parse(data) as {
          choices?: Array<{
            delta?: { content?: string; tool_calls?: Array<{ id?: string; function?: { arguments?: string } }> }
          }>
        }
      ).choices?.[0]?.delta
      if (delta?.content) turn.text += delta.content
      for (const call of delta?.tool_calls ?? []) {
        if (call.id) turn.callId = call.id
        turn.args += call.function?.arguments ?? ''
      }
    }
  }
  return turn
}

async function readBody(request: IncomingMessage): Promise<string> {
  let body = ''
  for await (const chunk of request) body += (chunk as Buffer).toString()
  return body
}

try {
  const config = JSON.parse(readFileSync(process.env.PLINTH_CONFIG ?? '', 'utf8')) as {
    models: Array<{ baseUrl: string }>
  }
  const upstream = config.models[0]!.baseUrl
  const db = await openDatabase()
  await db.query(
    'create table if not exists floor_events (id bigserial primary key, run uuid not null, type text not null, data jsonb not null)',
  )
  const stats = { queries: 0, queryMs: 0 }
  const insert = (run: string, type: string, data: object) => {
    stats.queries++
    return db.query('insert into floor_events (run, type, data) values ($1, $2, $3) returning id', [
      run,
      type,
      JSON.stringify(data),
    ])
  }
  const read = (sql: string) => {
    stats.queries++
    return db.query(sql)
  }

  const round = async (input: string, response: ServerResponse): Promise<void> => {
    const run = randomUUID()
    await read('select count(*) from floor_events where false')
    response.writeHead(201, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    let sequence = 0
    const send = (event: string, data: object) =>
      response.write(`id: ${++sequence}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`)
    await insert(run, 'run.created', { input })
    send('run.created', { id: run, status: 'queued' })
    await insert(run, 'round.started', { round: 1 })
    send('round.started', { round: 1 })
    const messages: object[] = [
      { role: 'system', content: 'You are an agent.' },
      { role: 'user', content: input },
    ]
    const first = await modelCall(upstream, messages)
    await insert(run, 'tool_call.requested', { id: first.callId, arguments: first.args })
    send('tool_call.requested', { id: first.callId, name: 'get_weather', arguments: JSON.parse(first.args) as object })
    await insert(run, 'tool_call.started', { id: first.callId })
    send('tool_call.started', { id: first.callId })
    const result = { city: 'Paris', tempC: 21, sky: 'clear' }
    await insert(run, 'tool_call.completed', { id: first.callId, result })
    send('tool_call.completed', { id: first.callId, status: 'ok', result })
    send('round.started', { round: 2 })
    messages.push(
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: first.callId, type: 'function', function: { name: 'get_weather', arguments: first.args } }],
      },
      { role: 'tool', tool_call_id: first.callId, content: JSON.stringify(result) },
    )
    const second = await modelCall(upstream, messages)
    await insert(run, 'run.completed', { content: second.text })
    send('message.delta', { delta: second.text })
    send('message.completed', { content: second.text })
    send('run.completed', { id: run })
    await read('select id from floor_events where false')
    response.end()
  }

  const server = createServer((request, response) => {
    void (async () => {
      const body = await readBody(request)
      if (request.url?.endsWith('/conversations')) {
        response.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: randomUUID() }))
      } else if (request.method === 'POST' && request.url?.endsWith('/runs')) {
        await round((JSON.parse(body) as { input: string }).input, response)
      } else response.writeHead(404).end()
    })().catch((error: unknown) => {
      console.error(error)
      response.destroy()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const statsServer = createServer((_request, response) => {
    const cpu = process.cpuUsage()
    response
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ ...stats, cpuMs: (cpu.user + cpu.system) / 1000, userMs: cpu.user / 1000, rssMb: 0 }))
  })
  await new Promise<void>((resolve) => statsServer.listen(0, '127.0.0.1', resolve))
  const port = (address: AddressInfo | string | null) => (address as AddressInfo).port
  announceReady(
    `http://127.0.0.1:${port(server.address())}`,
    { token: 'unused', projectId: 'unused', statsUrl: `http://127.0.0.1:${port(statsServer.address())}/` },
    async () => {
      server.closeAllConnections()
      server.close()
      statsServer.close()
      await db.close()
    },
  )
} catch (error) {
  fail(error)
}
