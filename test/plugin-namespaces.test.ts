import { pino } from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

const fixture = (name: string): string => new URL(`./__fixtures__/plugins/${name}.ts`, import.meta.url).pathname

interface LogLine {
  level: number
  msg: string
  plugin?: string
  [field: string]: unknown
}

// Real plugins loaded into a real server: namespaces are enforced at load, and context.log takes
// pino's (fields, message) order as well as (message, fields).
describe('plugin namespaces and logging', () => {
  let store: Store
  let server: TestServer
  let user: TestUser
  const lines: LogLine[] = []

  beforeAll(async () => {
    store = await openTestStore('pglite')
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as LogLine) })
    server = await startTestServer(store, {
      logger,
      plugins: ['rdm', fixture('poacher'), fixture('squatter'), fixture('core-squatter'), fixture('notes-kit')],
    })
    user = await server.createUser()
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it("refuses a plugin that registers a command in another plugin's namespace, or claims a namespace already had", async () => {
    const refusals = lines.filter((line) => line.msg.includes(' refused: ')).map((line) => line.msg)
    expect(refusals).toEqual([
      expect.stringMatching(/poacher\.ts refused: command rdm\.steal is outside the plugin's namespace hello \(/),
      expect.stringMatching(/squatter\.ts refused: namespace rdm belongs to plugin rdm$/),
      expect.stringMatching(/core-squatter\.ts refused: namespace core belongs to Plinth itself$/),
    ])
    const catalog = await server.request('GET', '/api/commands', { token: user.token })
    const ids = catalog.body.items.map((command: { id: string }) => command.id)
    // Nothing of a refused plugin is registered, not even its commands in its own namespace.
    expect(ids.filter((id: string) => /^(hello|squatter|rdm\.steal|core\.ping)/.test(id))).toEqual([])
    expect(ids).toEqual(expect.arrayContaining(['rdm.ping', 'notes.add', 'todo.add']))
  })

  it('loads a plugin with declared namespaces; its context.log takes (fields, message) and (message, fields)', async () => {
    const note = await server.request('POST', '/api/commands/notes.add', {
      token: user.token,
      body: { entrance: 'button', params: { text: 'launch at dawn' } },
    })
    expect(note.body).toMatchObject({ status: 'succeeded', result: { saved: 'launch at dawn' } })
    const todo = await server.request('POST', '/api/commands/todo.add', {
      token: user.token,
      body: { entrance: 'button', params: { item: 'pack snacks' } },
    })
    expect(todo.body).toMatchObject({ status: 'succeeded', result: { added: 'pack snacks' } })
    const logged = lines.filter((line) => line.plugin === 'notes-kit' && !line.msg.startsWith('plugin '))
    expect(logged).toEqual([
      expect.objectContaining({ level: 30, msg: 'note added', noteLength: 14 }),
      expect.objectContaining({ level: 40, msg: 'to-do added', item: 'pack snacks' }),
    ])
  })
})
