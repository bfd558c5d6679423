import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel, type ModelMessage } from '../src/llm/index.js'
import { WindowCache } from '../src/runmgr/transcript-window.js'
import type { Store, TranscriptRow } from '../src/store/index.js'
import { testDb } from '../src/store/test-access.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// An instance keeps a conversation's transcript window after a run; the next run it starts there
// reads only what was written after it (docs/guides/agent-runs.md#the-transcript-window).
for (const engine of testEngines()) {
  describe(`a kept transcript window, on ${engine}`, () => {
    let store: Store
    let a: TestServer
    let b: TestServer
    let alice: TestUser
    let projectId: string
    const model = new ScriptedModel({ id: 'kept', turns: [], contextWindow: 100_000 })

    beforeAll(async () => {
      store = await openTestStore(engine)
      // Two instances on one database (each with its own kept windows).
      a = await startTestServer(store, { models: [model], compaction: { enabled: false } })
      b = await startTestServer(store, { models: [model], compaction: { enabled: false } })
      alice = await a.createUser()
      projectId = (await a.request('POST', '/api/projects', { token: alice.token, body: { name: 'kept' } })).body.id
    })
    afterAll(async () => {
      await a?.close()
      await b?.close()
      await store?.close()
    })

    const newConversation = async (): Promise<string> =>
      (await a.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body.id
    /** One run through `server`; returns the messages the model was sent (system prompt left out). */
    const turn = async (server: TestServer, conversationId: string, input: string, answer: string) => {
      model.setTurns([{ text: answer }])
      const calls = model.calls.length
      const run = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
        token: alice.token,
        body: { input },
      })
      expect(run.status).toBe(201)
      expect(run.body.status).toBe('completed')
      expect(model.calls.length).toBe(calls + 1)
      return model.calls
        .at(-1)!
        .messages.filter((message) => message.role !== 'system')
        .map(text)
    }

    it('the next run sees every message, those written through another instance too', async () => {
      const conversationId = await newConversation()
      expect(await turn(a, conversationId, 'one', 'first answer')).toEqual(['user: one'])
      expect(await turn(a, conversationId, 'two', 'second answer')).toEqual([
        'user: one',
        'assistant: first answer',
        'user: two',
      ])
      // A run through the other instance, then back: the kept window is extended with what it wrote.
      expect(await turn(b, conversationId, 'three', 'third answer')).toEqual([
        'user: one',
        'assistant: first answer',
        'user: two',
        'assistant: second answer',
        'user: three',
      ])
      const history = [
        'user: one',
        'assistant: first answer',
        'user: two',
        'assistant: second answer',
        'user: three',
        'assistant: third answer',
        'user: four',
      ]
      expect(await turn(a, conversationId, 'four', 'fourth answer')).toEqual(history)
    })

    it('keeps the window: a message changed behind its back is not read again by the instance that kept it', async () => {
      // Plinth never changes a message once a window holds it; a change made in the database directly
      // shows which instance read the window anew and which extended the one it kept.
      const conversationId = await newConversation()
      await turn(a, conversationId, 'first question', 'an answer')
      await turn(a, conversationId, 'second question', 'another answer')
      await testDb(store)
        .updateTable('messages')
        .set({ content: 'changed' })
        .where('conversation_id', '=', conversationId)
        .where('content', '=', 'first question')
        .execute()
      expect((await turn(a, conversationId, 'third question', 'a third answer'))[0]).toBe('user: first question')
      // The other instance has no window of this conversation: it reads the whole window.
      expect((await turn(b, conversationId, 'fourth question', 'a fourth answer'))[0]).toBe('user: changed')
    })

    it('reads the whole window anew when a message landed inside the kept one (an id from a clock behind)', async () => {
      const conversationId = await newConversation()
      await turn(a, conversationId, 'first question', 'an answer')
      await turn(a, conversationId, 'second question', 'another answer')
      const first = await testDb(store)
        .selectFrom('messages')
        .select('id')
        .where('conversation_id', '=', conversationId)
        .where('content', '=', 'first question')
        .executeTakeFirstOrThrow()
      // Sorts right after the first message: inside the window the instance kept.
      await testDb(store)
        .insertInto('messages')
        .values({
          id: `${first.id}0`,
          conversation_id: conversationId,
          role: 'user',
          content: 'late',
          status: 'completed',
        })
        .execute()
      expect((await turn(a, conversationId, 'third question', 'a third answer')).slice(0, 3)).toEqual([
        'user: first question',
        'user: late',
        'assistant: an answer',
      ])
    })
  })
}

for (const engine of testEngines()) {
  describe(`a kept transcript window and a compaction made elsewhere, on ${engine}`, () => {
    let store: Store
    let a: TestServer
    let b: TestServer
    const model = new ScriptedModel({ id: 'small-window', turns: [], contextWindow: 4_000 })

    beforeAll(async () => {
      store = await openTestStore(engine)
      // Only the second instance compacts; the first keeps a window from before the compaction.
      a = await startTestServer(store, { models: [model], compaction: { enabled: false } })
      b = await startTestServer(store, { models: [model] })
    })
    afterAll(async () => {
      await a?.close()
      await b?.close()
      await store?.close()
    })

    it('the next run on the instance that kept the window sends the summary and what came after it', async () => {
      const alice = await a.createUser()
      const projectId = (await a.request('POST', '/api/projects', { token: alice.token, body: { name: 'p' } })).body.id
      const conversationId = (
        await a.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
      const run = async (server: TestServer, input: string, turns: Array<{ text: string }>): Promise<string[]> => {
        model.setTurns(turns)
        const answer = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
          token: alice.token,
          body: { input },
        })
        expect(answer.body.status).toBe('completed')
        return model.calls
          .at(-1)!
          .messages.filter((message) => message.role !== 'system')
          .map(text)
      }
      await run(a, 'one', [{ text: 'first answer' }])
      await run(a, 'two', [{ text: 'second answer' }])
      // Past the compaction threshold: the other instance summarises the first two turns, then answers.
      const long = `three ${'z'.repeat(12_500)}`
      await run(b, long, [{ text: 'SUMMARY OF ONE AND TWO' }, { text: 'third answer' }])
      const compactions = await b.request('GET', `/api/conversations/${conversationId}/compactions`, {
        token: alice.token,
      })
      expect(compactions.body.items).toHaveLength(1)
      const sent = await run(a, 'four', [{ text: 'fourth answer' }])
      expect(sent[0]).toMatch(/^user: <conversation-summary>[\s\S]*SUMMARY OF ONE AND TWO/)
      expect(sent.slice(1)).toEqual([`user: ${long}`, 'assistant: third answer', 'user: four'])
    })
  })
}

describe('WindowCache', () => {
  const row = (id: string, size: number, status = 'completed'): TranscriptRow => ({
    id,
    role: 'user',
    content: 'x',
    toolCalls: null,
    toolCallId: null,
    status,
    size,
  })

  it('answers only for the same window size', () => {
    const cache = new WindowCache(1_000)
    cache.put('c1', 500, [row('1', 10)])
    expect(cache.get('c1', 500)).toEqual([row('1', 10)])
    expect(cache.get('c1', 400)).toBeUndefined()
    expect(cache.get('c2', 500)).toBeUndefined()
  })

  it('keeps no window with a message still streaming, and none larger than its capacity', () => {
    const cache = new WindowCache(100)
    cache.put('c1', 500, [row('1', 10), row('2', 10, 'streaming')])
    cache.put('c2', 500, [row('1', 101)])
    cache.put('c3', 500, [])
    expect(cache.count).toBe(0)
  })

  it('lets the least recently used go first when full', () => {
    const cache = new WindowCache(100)
    cache.put('c1', 500, [row('1', 40)])
    cache.put('c2', 500, [row('1', 40)])
    cache.get('c1', 500)
    cache.put('c3', 500, [row('1', 40)])
    expect(cache.get('c2', 500)).toBeUndefined()
    expect(cache.get('c1', 500)).toBeDefined()
    expect(cache.get('c3', 500)).toBeDefined()
    // A newer window replaces the older one, counted once.
    cache.put('c3', 500, [row('1', 40), row('2', 20)])
    expect(cache.count).toBe(2)
    cache.put('c4', 500, [row('1', 1)])
    expect(cache.count).toBe(2)
  })
})

function text(message: ModelMessage): string {
  return `${message.role}: ${typeof message.content === 'string' ? message.content : JSON.stringify(message.content)}`
}
