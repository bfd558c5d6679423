/**
 * `npm run demo`: starts Plinth on a throwaway embedded database with the rdm plugin and the scripted
 * demo model, then drives the whole flow over HTTP — project → conversation → a streamed run in which
 * the model calls rdm.ping, then rdm.draft.compose, which waits for a human; the demo approves it —
 * printing the streamed events as they come.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createParser } from 'eventsource-parser'
import { createLogger, loadConfig, startServer } from '../src/app/index.js'
import { createToken, createUser } from '../src/store/index.js'

const dataDir = await mkdtemp(join(tmpdir(), 'plinth-demo-'))
const config = loadConfig({ PLINTH_DATA_DIR: dataDir, PLINTH_PLUGINS: 'rdm', PORT: '0', PLINTH_LOG_LEVEL: 'warn' }, dataDir)
const server = await startServer(config, createLogger(config.logLevel))

try {
  const user = await createUser(server.store.db, 'demo')
  if ('error' in user) throw new Error('cannot create the demo user')
  const { token } = await createToken(server.store.db, user.id, 'demo')
  const api = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(server.url + path, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    return (await response.json()) as Record<string, unknown> & { id: string }
  }

  console.log(`plinth demo on ${server.url} (embedded database in ${dataDir})\n`)
  const models = await api('GET', '/api/models')
  console.log(`models: ${JSON.stringify(models.items)}`)
  const project = await api('POST', '/api/projects', { name: 'Demo project' })
  console.log(`project      ${project.id}`)
  const conversation = await api('POST', `/api/projects/${project.id}/conversations`, { title: 'Demo conversation' })
  console.log(`conversation ${conversation.id}\n`)

  const response = await fetch(`${server.url}/api/conversations/${conversation.id}/runs`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ input: 'Is the service up? Then write a short note about it.' }),
  })
  console.log(`POST /runs → ${response.status}, streaming:\n`)
  let text = ''
  const pending: Array<Promise<void>> = []
  const parser = createParser({
    onEvent(event) {
      const data = JSON.parse(event.data) as Record<string, unknown>
      switch (event.event) {
        case 'message.delta':
          text += String(data.text)
          return
        case 'message.completed':
          if (text) console.log(`  assistant: ${text.trim()}`)
          text = ''
          return
        case 'tool_call.created':
          console.log(`  [${event.id}] tool call  ${String(data.name)}(${JSON.stringify(data.args)})  risk=${String(data.risk)}`)
          return
        case 'tool_call.completed':
          console.log(`  [${event.id}] tool done  ${String(data.status)}: ${JSON.stringify(data.output)}`)
          return
        case 'decision.required':
          console.log(`  [${event.id}] decision   "${String(data.preview)}" (${String(data.risk)}) — the demo approves it`)
          pending.push(api('POST', `/api/decisions/${String(data.decisionId)}`, { decision: 'approve', note: 'approved by npm run demo' }).then(() => undefined))
          return
        case 'decision.resolved':
          console.log(`  [${event.id}] decided    ${String(data.outcome)}`)
          return
        case 'run.status':
          console.log(`  [${event.id}] run        ${String(data.status)}${data.phase ? ` (${String(data.phase)})` : ''}`)
          return
        default:
          console.log(`  [${event.id}] ${event.event}`)
      }
    },
  })
  const decoder = new TextDecoder()
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) parser.feed(decoder.decode(chunk, { stream: true }))
  await Promise.all(pending)
  const audit = await api('GET', `/api/audit?conversationId=${conversation.id}`)
  console.log(`\naudit envelopes: ${(audit.items as Array<{ commandId: string; entrance: string; status: string }>).map((item) => `${item.commandId} (${item.entrance}, ${item.status})`).join(', ')}`)
} finally {
  await server.close()
  await rm(dataDir, { recursive: true, force: true })
}
