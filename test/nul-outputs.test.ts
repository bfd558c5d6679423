import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// Regression (docs/security.md#outputs-with-nul): `printf 'a\0b'` through core.exec, read_file of a file
// with a NUL, and a run whose model text, tool arguments or tool output held U+0000 answered 500 or
// ended the run `internal`, leaving its dispatch `running`. Postgres cannot store U+0000: it is stored
// (and answered) as U+FFFD.
describe.each(testEngines())('outputs holding NUL on %s', (engine) => {
  let store: Store
  let server: TestServer
  let model: ScriptedModel
  let alice: TestUser
  let conversationId: string

  beforeAll(async () => {
    store = await openTestStore(engine)
    model = new ScriptedModel({ id: 'scripted', turns: [] })
    server = await startTestServer(store, { models: [model], exec: { backend: 'direct' } })
    alice = await server.createUser()
    const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'nul' } }))
      .body.id
    conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    const upload = await fetch(`${server.url}/api/conversations/${conversationId}/files/nul.bin`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${alice.token}`, 'content-type': 'application/octet-stream' },
      body: Buffer.from('a\0b\n'),
    })
    expect(upload.status).toBe(201)
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  const dispatch = (id: string, params: object) =>
    server.request('POST', `/api/commands/${id}`, {
      token: alice.token,
      body: { entrance: 'button', conversationId, params },
    })

  it('an execution printing a NUL answers its result, the NUL stored as U+FFFD', async () => {
    const asked = await dispatch('core.exec', { command: "printf 'a\\0b'; printf 'err\\0' >&2" })
    expect(asked.status).toBe(202)
    const decided = await server.request('POST', `/api/decisions/${asked.body.decision.id}`, {
      token: alice.token,
      body: { decision: 'approve' },
    })
    expect(decided.status).toBe(200)
    expect(decided.body.dispatch).toMatchObject({
      status: 'succeeded',
      result: { exitCode: 0, stdout: 'a\uFFFDb', stderr: 'err\uFFFD' },
    })
    const audit = await server.request('GET', `/api/audit?conversationId=${conversationId}&commandId=core.exec`, {
      token: alice.token,
    })
    expect(audit.body.items[0]).toMatchObject({ status: 'succeeded' })
  })

  it('read_file of a file holding a NUL answers 200', async () => {
    const read = await dispatch('core.read_file', { path: 'nul.bin' })
    expect(read.status).toBe(200)
    expect(read.body.result.content).toBe('a\uFFFDb\n')
  })

  it('a run whose model text, tool arguments and tool output hold NUL completes, and every dispatch ends', async () => {
    model.setTurns([
      {
        text: 'reading\u0000 it',
        toolCalls: [
          { name: 'read_file', arguments: { path: 'nul.bin' } },
          { name: 'list_files', arguments: { path: 'di\u0000r' } },
        ],
      },
      { text: 'done\u0000.' },
    ])
    const run = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
      token: alice.token,
      body: { input: 'read nul.bin', model: 'scripted' },
    })
    expect(run.status, JSON.stringify(run.body)).toBe(201)
    expect(run.body.status).toBe('completed')
    const messages = (
      await server.request('GET', `/api/conversations/${conversationId}/messages`, { token: alice.token })
    ).body.items
    expect(messages.at(-1)).toMatchObject({ role: 'assistant', content: 'done\uFFFD.' })
    const tools = messages.filter((message: { role: string }) => message.role === 'tool')
    expect(tools.map((message: { content: string }) => message.content).join('\n')).toContain('a\uFFFDb')
    const audit = await server.request('GET', `/api/audit?conversationId=${conversationId}`, { token: alice.token })
    expect(audit.body.items.map((item: { status: string }) => item.status)).not.toContain('running')
  })
})
