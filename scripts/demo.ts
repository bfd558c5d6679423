/**
 * `npm run demo`: starts Plinth on a throwaway embedded database with the rdm plugin and the scripted
 * demo model, then drives the whole flow over HTTP — project → conversation → a streamed run in which
 * the model calls rdm.ping, then rdm.draft.compose, which waits for a human; the demo approves it —
 * printing the streamed events as they come.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createLogger, loadConfig, startServer } from '../src/app/index.js'
import { createClient } from '../src/client/index.js'
import { createToken, createUser } from '../src/store/index.js'

const dataDir = await mkdtemp(join(tmpdir(), 'plinth-demo-'))
const config = loadConfig(
  { PLINTH_DATA_DIR: dataDir, PLINTH_PLUGINS: 'rdm', PORT: '0', PLINTH_LOG_LEVEL: 'warn' },
  dataDir,
)
const server = await startServer(config, createLogger(config.logLevel))

try {
  const user = await createUser(server.store, 'demo')
  if ('error' in user) throw new Error('cannot create the demo user')
  const { token } = await createToken(server.store, user.id, 'demo')
  // The same client an app would use (plinth/client): typed calls, and the run's events as they come.
  const plinth = createClient({ baseUrl: server.url, token })

  console.log(`plinth demo on ${server.url} (embedded database in ${dataDir})\n`)
  const models = await plinth.models()
  console.log(`models: ${JSON.stringify(models.items)}`)
  const project = await plinth.projects.create({ name: 'Demo project' })
  console.log(`project      ${project.id}`)
  const conversation = await plinth.conversations.create(project.id, { title: 'Demo conversation' })
  console.log(`conversation ${conversation.id}\n`)

  console.log('POST /runs, streaming:\n')
  let text = ''
  for await (const event of plinth.runs.start(conversation.id, {
    input: 'Is the service up? Then write a short note about it.',
  })) {
    switch (event.event) {
      case 'message.delta':
        text += event.data.text
        break
      case 'message.completed':
        if (text) console.log(`  assistant: ${text.trim()}`)
        text = ''
        break
      case 'tool_call.created':
        console.log(
          `  [${event.id}] tool call  ${event.data.name}(${JSON.stringify(event.data.args)})  risk=${String(event.data.risk)}`,
        )
        break
      case 'tool_call.completed':
        console.log(`  [${event.id}] tool done  ${event.data.status}: ${JSON.stringify(event.data.output)}`)
        break
      case 'decision.required':
        console.log(
          `  [${event.id}] decision   "${String(event.data.preview)}" (${String(event.data.risk)}) — the demo approves it`,
        )
        await plinth.decisions.answer(event.data.decisionId, { decision: 'approve', note: 'approved by npm run demo' })
        break
      case 'decision.resolved':
        console.log(`  [${event.id}] decided    ${event.data.outcome}`)
        break
      case 'run.status':
        console.log(
          `  [${event.id}] run        ${event.data.status}${event.data.phase ? ` (${event.data.phase})` : ''}`,
        )
        break
      default:
        console.log(`  [${event.id}] ${event.event}`)
    }
  }
  const audit = await plinth.request<{ items: Array<{ commandId: string; entrance: string; status: string }> }>(
    'GET',
    '/api/audit',
    { query: { conversationId: conversation.id } },
  )
  console.log(
    `\naudit envelopes: ${audit.items.map((item) => `${item.commandId} (${item.entrance}, ${item.status})`).join(', ')}`,
  )
} finally {
  await server.close()
  await rm(dataDir, { recursive: true, force: true })
}
