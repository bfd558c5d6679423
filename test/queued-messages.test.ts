import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel, type ModelMessage } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import { sql, testDb } from '../src/store/test-access.js'
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
    /** Messages as `role:content` (a tool result as `tool`), the system prompt left out. */
    const shape = (messages: ReadonlyArray<{ role: string; content?: unknown }>) =>
      messages
        .filter((message) => message.role !== 'system')
        .map((message) => (message.role === 'tool' ? 'tool' : `${message.role}:${String(message.content ?? '')}`))
    const transcript = async (conversationId: string) =>
      shape(
        (
          await server.request('GET', `/api/conversations/${conversationId}/messages?limit=100`, {
            token: alice.token,
          })
        ).body.items,
      )
    /** A run waiting for a decision and a question queued behind it; `approve` lets the first go on. */
    const queueBehindDecision = async () => {
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      scripted.setTurns([
        { toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'T', body: 'B' } }] },
        { text: 'draft written' },
        { text: 'answer to the question' },
      ])
      const before = scripted.calls.length
      const first = (await post(conversationId, { input: 'write a draft' })).body
      const waiting = await waitForRun(server, alice.token, first.id, ['requires_action'])
      const question = (await post(conversationId, { input: 'and then what?', ifActive: 'enqueue' })).body
      const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!
        .decisionId
      const approve = async () => {
        await server.request('POST', `/api/decisions/${decisionId}`, {
          token: alice.token,
          body: { decision: 'approve' },
        })
        await waitForRun(server, alice.token, question.id, ['completed'])
      }
      return { conversationId, before, approve }
    }

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
      // The queued question comes after everything the run ahead of it wrote: in the prompt and the transcript.
      expect(shape(calls[2]!.messages)).toEqual([
        'user:first',
        'assistant:',
        'tool',
        'assistant:answer one',
        'user:second',
      ])
      expect(await transcript(conversationId)).toEqual([
        'user:first',
        'assistant:',
        'tool',
        'assistant:answer one',
        'user:second',
        'assistant:answer two',
      ])
    })

    it('a message queued while the run ahead waits for a decision comes after that run’s answer', async () => {
      const { conversationId, before, approve } = await queueBehindDecision()
      await approve()
      const calls = scripted.calls.slice(before)
      expect(shape(calls[2]!.messages)).toEqual([
        'user:write a draft',
        'assistant:',
        'tool',
        'assistant:draft written',
        'user:and then what?',
      ])
      expect(await transcript(conversationId)).toEqual([
        'user:write a draft',
        'assistant:',
        'tool',
        'assistant:draft written',
        'user:and then what?',
        'assistant:answer to the question',
      ])
    })

    it('a started queued message sorts after the last message even when another instance’s clock ran ahead', async () => {
      const { conversationId, approve } = await queueBehindDecision()
      // A message written by an instance whose clock is ahead: its id sorts after any this one makes now.
      await sql`insert into messages (id, conversation_id, role, content, status)
                values ('01ZZZZZZZZ0000000000000000', ${conversationId}, 'assistant', 'from a clock ahead', 'completed')`.execute(
        testDb(store),
      )
      await approve()
      const lines = await transcript(conversationId)
      expect(lines.indexOf('user:and then what?')).toBeGreaterThan(lines.indexOf('assistant:from a clock ahead'))
      expect(lines).toContain('assistant:answer to the question')
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
