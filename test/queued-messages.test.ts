import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel, type ModelMessage } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// A message queued behind the active run (`ifActive: "enqueue"`) is that queued run's to answer: the
// active run's later rounds do not see it, and once cancelled while queued nobody answers it.
for (const engine of apiEngines()) {
  describe(`queued messages on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let projectId: string
    const scripted = new ScriptedModel({ id: 'scripted', turns: [] })

    beforeAll(async () => {
      store = await openTestStore(engine)
      const slowPlugin = new URL('./__fixtures__/plugins/slow-tool.ts', import.meta.url).pathname
      server = await startTestServer(store, { plugins: ['rdm', slowPlugin], models: [scripted] })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'q' } })).body.id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const userTexts = (messages: readonly ModelMessage[]): unknown[] =>
      messages.filter((message) => message.role === 'user').map((message) => message.content)
    const post = (conversationId: string, body: Record<string, unknown>) =>
      server.request('POST', `/api/conversations/${conversationId}/runs`, { token: alice.token, body })

    it('the active run does not answer a message queued behind it; the queued run does, once', async () => {
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      scripted.setTurns([
        { toolCalls: [{ name: 'slow__brief', arguments: {} }] },
        { text: 'answer one' },
        { text: 'answer two' },
      ])
      const before = scripted.calls.length
      const first = (await post(conversationId, { input: 'first' })).body
      await waitForRun(server, alice.token, first.id, (run) => run.phase === 'tool_running')
      const second = (await post(conversationId, { input: 'second', ifActive: 'enqueue' })).body
      expect(second.status).toBe('queued')
      await waitForRun(server, alice.token, second.id, ['completed'])
      const calls = scripted.calls.slice(before)
      expect(calls.map((call) => userTexts(call.messages))).toEqual([['first'], ['first'], ['first', 'second']])
      expect(calls[2]!.messages.at(-1)).toMatchObject({ role: 'user', content: 'second' })
    })

    it('a message cancelled while queued is never put before the model', async () => {
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      scripted.setTurns([
        { toolCalls: [{ name: 'slow__brief', arguments: {} }] },
        { text: 'answer one' },
        { text: 'answer three' },
      ])
      const before = scripted.calls.length
      const first = (await post(conversationId, { input: 'first' })).body
      await waitForRun(server, alice.token, first.id, (run) => run.phase === 'tool_running')
      const dropped = (await post(conversationId, { input: 'never mind this', ifActive: 'enqueue' })).body
      await server.request('POST', `/api/runs/${dropped.id}/cancel`, { token: alice.token })
      await waitForRun(server, alice.token, first.id, ['completed'])
      const third = (await post(conversationId, { input: 'third' })).body
      await waitForRun(server, alice.token, third.id, ['completed'])
      const calls = scripted.calls.slice(before)
      for (const call of calls) expect(userTexts(call.messages)).not.toContain('never mind this')
      expect(userTexts(calls.at(-1)!.messages)).toEqual(['first', 'third'])
    })
  })
}
