import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { OpenAIChatModel } from '../src/llm/index.js'
import { newId, type Store } from '../src/store/index.js'
import { sql, testDb } from '../src/store/test-access.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import { openaiTextChunks, startFakeUpstream, type FakeUpstream } from './helpers/fake-upstream.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// Context compaction (docs/guides/agent-runs.md#context-compaction): a run starting in a conversation
// past the threshold has its oldest turns summarised once; later prompts send the summary and the recent
// window, never splitting an assistant's tool calls from their results; the messages stay readable.

interface WireMessage {
  role: string
  content: unknown
  tool_call_id?: string
  tool_calls?: Array<{ id: string }>
}

for (const engine of apiEngines()) {
  describe(`context compaction (${engine})`, () => {
    let store: Store
    let server: TestServer
    let upstream: FakeUpstream
    let alice: TestUser
    let projectId: string

    beforeAll(async () => {
      upstream = await startFakeUpstream()
      store = await openTestStore(engine)
      // A small window (2,000 tokens): a long conversation is far past it.
      const small = new OpenAIChatModel({
        id: 'small',
        model: 'gpt-test',
        baseUrl: `${upstream.url}/v1`,
        apiKey: 'sk-test-secret-key-0123456789',
        contextWindow: 2000,
        supportsTools: true,
        idleTimeoutMs: 2_000,
      })
      server = await startTestServer(store, { plugins: ['rdm'], models: [small] })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'long' } })).body
        .id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
      await upstream?.close()
    })

    /** A conversation holding `turns` turns of 4 messages: a question, a tool call, its result, an answer. */
    const seeded = async (turns: number): Promise<{ id: string; firstMessageId: string }> => {
      const id = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      const rows = []
      for (let turn = 0; turn < turns; turn++) {
        const callId = `call-${turn}`
        const calls = JSON.stringify([{ callId, providerCallId: callId, name: 'rdm__ping', arguments: '{}' }])
        rows.push(
          sql`(${newId()}, ${id}, 'user', ${`Question ${turn}: how is service ${turn} doing today?`}, null, null)`,
          sql`(${newId()}, ${id}, 'assistant', '', ${calls}::jsonb, null)`,
          sql`(${newId()}, ${id}, 'tool', ${`{"pong":true,"target":"service ${turn}"}`}, null, ${callId})`,
          sql`(${newId()}, ${id}, 'assistant', ${`Service ${turn} is fine.`}, null, null)`,
        )
      }
      for (let start = 0; start < rows.length; start += 1000)
        await sql`insert into messages (id, conversation_id, role, content, tool_calls, tool_call_id)
          values ${sql.join(rows.slice(start, start + 1000))}`.execute(testDb(store))
      const first = await server.request('GET', `/api/conversations/${id}/messages?limit=1`, { token: alice.token })
      return { id, firstMessageId: first.body.items[0].id }
    }

    const runIn = async (conversationId: string, input: string, extra: Record<string, unknown> = {}) => {
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input, model: 'small', approvalPolicy: 'dontAsk', ...extra },
      })
      expect(created.status).toBe(201)
      const run = await waitForRun(server, alice.token, created.body.id as string, ['completed', 'failed'])
      expect(run.status).toBe('completed')
      return run
    }

    const events = async (runId: string) =>
      String(
        (
          await server.request('GET', `/api/runs/${runId}/events`, {
            token: alice.token,
            headers: { accept: 'text/event-stream' },
          })
        ).body,
      )

    /** Every tool result in a request follows the assistant message that made its call. */
    const triplesWhole = (messages: WireMessage[]) =>
      messages.every(
        (message, index) =>
          message.role !== 'tool' ||
          messages
            .slice(0, index)
            .some((earlier) => earlier.tool_calls?.some((call) => call.id === message.tool_call_id)),
      )

    it('a 2,000-message conversation runs with a bounded prompt; the summary call happens once', async () => {
      const conversation = await seeded(500)
      upstream.clear()
      const start = upstream.requests.length
      upstream.enqueue({
        kind: 'openai-stream',
        chunks: openaiTextChunks('SUMMARY-ONE: 500 services checked.', 2, { prompt: 900, completion: 40 }),
      })
      upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('All fine.', 2) })
      const first = await runIn(conversation.id, 'And service 7?')
      // The summary call counts in the run's usage like the round's own call (10 in, 5 out).
      expect(first.usage).toMatchObject({ modelCalls: 2, inputTokens: 910, outputTokens: 45 })
      const byRun = await server.request('GET', `/api/usage?groupBy=run`, { token: alice.token })
      expect(byRun.body.groups.find((group: { key: string }) => group.key === first.id)).toMatchObject({
        modelCalls: 2,
        inputTokens: 910,
      })
      const calls = upstream.requests
        .slice(start)
        .map((request) => request.body as { messages: WireMessage[]; tools?: unknown })
      expect(calls).toHaveLength(2)

      // The summary call: the summariser's instructions, the older turns, no tools.
      expect(calls[0]!.tools).toBeUndefined()
      expect(calls[0]!.messages[0]).toMatchObject({ role: 'system', content: expect.stringMatching(/compact/) })
      expect(calls[0]!.messages[1]!.content).toMatch(/Transcript to summarise:[\s\S]*Question 4\d\d/)

      // The round's call: the summary first, then whole turns, within the window.
      const round = calls[1]!.messages
      expect(round[1]).toMatchObject({ role: 'user', content: expect.stringMatching(/^<conversation-summary>/) })
      expect(round[1]!.content).toMatch(/SUMMARY-ONE/)
      expect(round[2]!.role).toBe('user')
      expect(round.at(-1)).toMatchObject({ role: 'user', content: 'And service 7?' })
      expect(triplesWhole(round)).toBe(true)
      expect(JSON.stringify(round).length).toBeLessThan(2000 * 4)
      expect(await events(first.id as string)).toMatch(/event: conversation\.compacted\ndata: .*"model":"small"/)

      // Visible in the API with the range it stands for; the messages stay readable.
      const listed = await server.request('GET', `/api/conversations/${conversation.id}/compactions`, {
        token: alice.token,
      })
      expect(listed.body.items).toHaveLength(1)
      const compaction = listed.body.items[0]
      expect(compaction).toMatchObject({
        conversationId: conversation.id,
        afterMessageId: null,
        summary: 'SUMMARY-ONE: 500 services checked.',
        runId: first.id,
        model: 'small',
      })
      expect(compaction.messageCount).toBeGreaterThan(1900)
      const stillThere = await server.request('GET', `/api/conversations/${conversation.id}/messages?limit=1`, {
        token: alice.token,
      })
      expect(stillThere.body.items[0].id).toBe(conversation.firstMessageId)

      // The next run: no summary call, the summary sent again.
      const before = upstream.requests.length
      upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Still fine.', 2) })
      await runIn(conversation.id, 'And service 8?')
      const next = upstream.requests.slice(before).map((request) => request.body as { messages: WireMessage[] })
      expect(next).toHaveLength(1)
      expect(next[0]!.messages[1]!.content).toMatch(/SUMMARY-ONE/)
      expect(triplesWhole(next[0]!.messages)).toBe(true)
    })

    it('a summary call that fails leaves the run going, and says so', async () => {
      const conversation = await seeded(60)
      upstream.clear()
      const before = upstream.requests.length
      upstream.enqueue({ kind: 'error', status: 500, body: { error: { message: 'summariser down' } } })
      upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Answered anyway.', 2) })
      const run = await runIn(conversation.id, 'And service 3?')
      expect(await events(run.id as string)).toMatch(/event: compaction\.failed\ndata: .*"runId"/)
      expect(upstream.requests.length - before).toBe(2)
      const round = (upstream.requests[before + 1]!.body as { messages: WireMessage[] }).messages
      expect(JSON.stringify(round)).not.toMatch(/conversation-summary/)
      expect(triplesWhole(round)).toBe(true)
      const listed = await server.request('GET', `/api/conversations/${conversation.id}/compactions`, {
        token: alice.token,
      })
      expect(listed.body.items).toEqual([])
    })

    it('a run with no retrieval (no knowledge, no recall) compacts a long conversation too', async () => {
      const conversation = await seeded(500)
      upstream.clear()
      const start = upstream.requests.length
      upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('SUMMARY-ISOLATED.', 2) })
      upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Fine.', 2) })
      const run = await runIn(conversation.id, 'And service 9?', {
        knowledge: { autoInject: false },
        memory: { recall: false },
      })
      expect(run.usage).toMatchObject({ modelCalls: 2 })
      const calls = upstream.requests.slice(start).map((request) => request.body as { messages: WireMessage[] })
      expect(calls).toHaveLength(2)
      expect(calls[0]!.messages[0]).toMatchObject({ role: 'system', content: expect.stringMatching(/compact/) })
      expect(calls[1]!.messages[1]!.content).toMatch(/SUMMARY-ISOLATED/)
    })

    it('POST /compact forces it: all but the last turn, then nothing more to compact', async () => {
      const conversation = await seeded(3)
      upstream.clear()
      upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Two turns about services 0 and 1.', 2) })
      const forced = await server.request('POST', `/api/conversations/${conversation.id}/compact`, {
        token: alice.token,
        body: {},
      })
      expect(forced.status).toBe(201)
      expect(forced.body).toMatchObject({ messageCount: 8, runId: null, summary: 'Two turns about services 0 and 1.' })
      // Its summary call is recorded, with no run: under the empty key by run.
      const byRun = await server.request('GET', `/api/usage?groupBy=run&limit=1`, { token: alice.token })
      expect(byRun.body.groups[0]).toMatchObject({ key: '', modelCalls: 1, inputTokens: 10, outputTokens: 5 })
      // The empty key is a page's last key like any other: the next page goes on after it.
      expect(byRun.body.nextCursor).toEqual(expect.any(String))
      const next = await server.request('GET', `/api/usage?groupBy=run&limit=1&cursor=${byRun.body.nextCursor}`, {
        token: alice.token,
      })
      expect(next.body.groups).toHaveLength(1)
      expect(next.body.groups[0].key).not.toBe('')
      const again = await server.request('POST', `/api/conversations/${conversation.id}/compact`, {
        token: alice.token,
      })
      expect([again.status, again.body.code]).toEqual([409, 'nothing_to_compact'])

      // A failing summariser changes nothing: 502.
      const other = await seeded(3)
      upstream.enqueue({ kind: 'error', status: 503, body: 'down' })
      const failed = await server.request('POST', `/api/conversations/${other.id}/compact`, { token: alice.token })
      expect([failed.status, failed.body.code]).toEqual([502, 'compaction_failed'])
      const none = await server.request('GET', `/api/conversations/${other.id}/compactions`, { token: alice.token })
      expect(none.body.items).toEqual([])

      // Someone else's conversation is not there.
      const bob = await server.createUser()
      const foreign = await server.request('POST', `/api/conversations/${conversation.id}/compact`, {
        token: bob.token,
      })
      expect(foreign.status).toBe(404)
    })
  })
}
