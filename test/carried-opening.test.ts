import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel, type ModelMessage } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { testDb } from '../src/store/test-access.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { ledgerViolations } from './helpers/ledger.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { settledRunStatuses, waitFor, waitForRun } from './helpers/waits.js'

// After a round of calls, the next round opens in the statement that records the last call's answer
// (docs/architecture.md#the-run-loop): one commit fewer per round, and nothing else changes.
for (const engine of testEngines()) {
  describe(`the next round opened with the last call's answer, on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let projectId: string
    const model = new ScriptedModel({ id: 'carried', turns: [] })

    beforeAll(async () => {
      store = await openTestStore(engine)
      const slowPlugin = new URL('./__fixtures__/plugins/slow-tool.ts', import.meta.url).pathname
      server = await startTestServer(store, {
        plugins: ['rdm', slowPlugin],
        models: [model],
        compaction: { enabled: false },
      })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'carried' } }))
        .body.id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const newConversation = async (): Promise<string> =>
      (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body
        .id
    const transcript = async (conversationId: string) =>
      (
        await server.request('GET', `/api/conversations/${conversationId}/messages?limit=50`, {
          token: alice.token,
        })
      ).body.items as Array<{ role: string; status: string; content: string }>
    const run = async (conversationId: string, input: string) => {
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
        token: alice.token,
        body: { input },
      })
      expect(created.status).toBe(201)
      return created.body as { id: string; status: string; iteration: number }
    }

    it('writes the last answer and the next round in one transaction; the model and the transcript see the answers in order', async () => {
      const conversationId = await newConversation()
      model.setTurns([
        {
          toolCalls: [
            { name: 'rdm__ping', arguments: { target: 'a' } },
            { name: 'rdm__ping', arguments: { target: 'b' } },
          ],
        },
        { text: 'both answered' },
      ])
      const calls = model.calls.length
      const done = await run(conversationId, 'ping both')
      expect(done).toMatchObject({ status: 'completed', iteration: 2 })

      // The second turn was sent both answers, after the turn that asked for them.
      const second = model.calls[calls + 1]!.messages.filter((message) => message.role !== 'system')
      expect(second.map(role)).toEqual(['user', 'assistant', 'tool', 'tool'])

      // The transcript lists them in that order, the answer last.
      const messages = await transcript(conversationId)
      expect(messages.map((message) => message.role)).toEqual(['user', 'assistant', 'tool', 'tool', 'assistant'])
      expect(messages.at(-1)).toMatchObject({ content: 'both answered', status: 'completed' })

      // The last call's tool_call.completed and the second round's opening: one transaction (the
      // same transaction time), their events consecutive.
      const events = await testDb(store)
        .selectFrom('events')
        .select(['id', 'type', 'data', 'created_at'])
        .where('run_id', '=', done.id)
        .orderBy('id')
        .execute()
      const completed = events.filter((event) => event.type === 'tool_call.completed')
      expect(completed).toHaveLength(2)
      const last = completed[1]!
      const following = events.slice(events.indexOf(last) + 1, events.indexOf(last) + 5)
      expect(following.map((event) => event.type)).toEqual([
        'run.status',
        'run.status',
        'round.started',
        'message.created',
      ])
      expect(following.map((event) => (event.data as { phase?: string }).phase)).toEqual([
        'tool_done',
        'finalizing',
        undefined,
        undefined,
      ])
      for (const event of following)
        expect(new Date(event.created_at).getTime()).toBe(new Date(last.created_at).getTime())
      expect(following.map((event) => Number(event.id))).toEqual([1, 2, 3, 4].map((step) => Number(last.id) + step))

      // The next run of the conversation (the instance's kept window) sees the same order.
      model.setTurns([{ text: 'again' }])
      await run(conversationId, 'and now')
      expect(
        model.calls
          .at(-1)!
          .messages.filter((message) => message.role !== 'system')
          .map(role),
      ).toEqual(['user', 'assistant', 'tool', 'tool', 'assistant', 'user'])
    })

    it('a call that waits for a person opens nothing: the run waits with no new round', async () => {
      const conversationId = await newConversation()
      // A draft is high risk: it waits for a decision.
      model.setTurns([
        {
          toolCalls: [
            { name: 'rdm__ping', arguments: { target: 'a' } },
            { name: 'rdm__draft__compose', arguments: { title: 'Notes', body: 'b' } },
          ],
        },
        { text: 'done' },
      ])
      const waiting = await run(conversationId, 'ping and draft')
      expect(waiting).toMatchObject({ status: 'requires_action', iteration: 1 })
      expect((await transcript(conversationId)).map((message) => message.role)).toEqual(['user', 'assistant', 'tool'])
    })

    it('a run cancelled during its last call ends with no round left open', async () => {
      const conversationId = await newConversation()
      model.setTurns([{ toolCalls: [{ name: 'slow__wait', arguments: {} }] }, { text: 'never asked' }])
      const calls = model.calls.length
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'wait' },
      })
      expect(created.status).toBe(201)
      const runId = created.body.id as string
      await waitFor(
        async () =>
          (
            await testDb(store)
              .selectFrom('run_tool_calls')
              .select('status')
              .where('run_id', '=', runId)
              .executeTakeFirst()
          )?.status === 'running',
        { what: 'the call to be running' },
      )
      // The command ends when the cancel reaches it, and its answer is recorded like any other.
      expect((await server.request('POST', `/api/runs/${runId}/cancel`, { token: alice.token })).status).toBe(200)
      const ended = await waitForRun(server, alice.token, runId, settledRunStatuses)
      expect(ended.status).toBe('cancelled')
      expect(model.calls.length).toBe(calls + 1)
      // The call's answer is the last thing written: no round opened only to be closed.
      const messages = await transcript(conversationId)
      expect(messages.map((message) => message.role)).toEqual(['user', 'assistant', 'tool'])
      expect(messages[2]!.status).toBe('completed')
      expect(await ledgerViolations(store)).toEqual([])
    })
  })
}

function role(message: ModelMessage): string {
  return message.role
}
