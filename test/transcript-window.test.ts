import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { estimateTokens } from '../src/runmgr/index.js'
import { ScriptedModel } from '../src/llm/index.js'
import { TranscriptWindow } from '../src/runmgr/transcript-window.js'
import { newId, readTranscriptTail, transcriptRowsFromJson, type Store } from '../src/store/index.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { sql, testDb } from '../src/store/test-access.js'
import { runView } from '../src/resources/index.js'

// A long conversation is not re-read whole before every model call; what is read
// is bounded by the model's window, and the request still ends with the newest turns.
for (const engine of testEngines()) {
  describe(`a long conversation, on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let conversationId: string
    const model = new ScriptedModel({ id: 'small', turns: [], contextWindow: 4_000 })

    beforeAll(async () => {
      store = await openTestStore(engine)
      // The window's own mechanics: no compaction (test/compaction.test.ts covers it).
      server = await startTestServer(store, { models: [model], compaction: { enabled: false } })
      alice = await server.createUser()
      const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'long' } }))
        .body.id
      conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
      // 500 earlier messages of 1,000 characters each (≈ 125k tokens, far past the 4k window).
      const rows = Array.from({ length: 500 }, (_, index) => ({
        id: newId(),
        conversation_id: conversationId,
        role: index % 2 === 0 ? ('user' as const) : ('assistant' as const),
        content: `m${index} ${'x'.repeat(990)}`,
        status: 'completed',
      }))
      await testDb(store).insertInto('messages').values(rows).execute()
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    it('reads only the tail that fits, newest last', async () => {
      const tail = await readTranscriptTail(store, conversationId, 20_000)
      expect(tail.length).toBeGreaterThan(10)
      expect(tail.length).toBeLessThan(25)
      expect(tail.at(-1)!.content).toMatch(/^m499 /)
      const numbers = tail.map((message) => Number(/^m(\d+)/.exec(message.content ?? '')![1]))
      expect(numbers).toEqual([...numbers].sort((a, b) => a - b))
    })

    it('a run there sends the model a window within its budget, ending with the new message', async () => {
      model.setTurns([{ text: 'short answer' }])
      const run = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
        token: alice.token,
        body: { input: 'and now?' },
      })
      expect(run.status).toBe(201)
      expect(run.body.status).toBe('completed')
      const sent = model.calls.at(-1)!.messages
      expect(sent.at(-1)).toEqual({ role: 'user', content: 'and now?' })
      expect(estimateTokens(sent)).toBeLessThan(4_000)
      // The oldest turns were left out; the newest earlier ones are there.
      const contents = sent.map((message) => (typeof message.content === 'string' ? message.content : ''))
      expect(contents.some((content) => content.startsWith('m499 '))).toBe(true)
      expect(contents.some((content) => content.startsWith('m0 '))).toBe(false)
    })

    it('keeps the latest 6 messages and the question they answer, however long they are', async () => {
      const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'big' } }))
        .body.id
      const big = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      // Ten messages of 20,000 characters each: any one of them is past the 4k-token window.
      const rows = Array.from({ length: 10 }, (_, index) => ({
        id: newId(),
        conversation_id: big,
        role: index % 2 === 0 ? ('user' as const) : ('assistant' as const),
        content: `b${index} ${'y'.repeat(20_000)}`,
        status: 'completed',
      }))
      await testDb(store).insertInto('messages').values(rows).execute()
      model.setTurns([{ text: 'ok' }])
      const run = await server.request('POST', `/api/conversations/${big}/runs?wait=true`, {
        token: alice.token,
        body: { input: 'and then?' },
      })
      expect(run.status).toBe(201)
      const sent = model.calls
        .at(-1)!
        .messages.filter((message) => message.role !== 'system')
        .map((message) => (typeof message.content === 'string' ? message.content.slice(0, 3) : ''))
      // The latest 6 begin with an answer (b5): its question (b4) comes with it.
      expect(sent).toEqual(['b4 ', 'b5 ', 'b6 ', 'b7 ', 'b8 ', 'b9 ', 'and'])
      // The next run extends the window this instance kept: the same rule.
      model.setTurns([{ text: 'ok' }])
      await server.request('POST', `/api/conversations/${big}/runs?wait=true`, {
        token: alice.token,
        body: { input: 'more?' },
      })
      const next = model.calls
        .at(-1)!
        .messages.filter((message) => message.role !== 'system')
        .map((message) => (typeof message.content === 'string' ? message.content.slice(0, 3) : ''))
      expect(next).toEqual(['b6 ', 'b7 ', 'b8 ', 'b9 ', 'and', 'ok', 'mor'])
    })

    it('a turn of many long rounds keeps its latest 6 without reading the whole turn', async () => {
      const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'loop' } }))
        .body.id
      const loop = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      const rows = [
        { id: newId(), conversation_id: loop, role: 'user' as const, content: 'q', status: 'completed' },
        ...Array.from({ length: 300 }, (_, index) => ({
          id: newId(),
          conversation_id: loop,
          role: 'assistant' as const,
          content: `r${index} ${'z'.repeat(20_000)}`,
          status: 'completed',
        })),
      ]
      await testDb(store).insertInto('messages').values(rows).execute()
      const tail = await readTranscriptTail(store, loop, 20_000)
      expect(tail.map((row) => row.content?.slice(0, 4))).toEqual(['r294', 'r295', 'r296', 'r297', 'r298', 'r299'])
      const window = new TranscriptWindow(store, loop, 20_000)
      expect((await window.read()).length).toBe(6)
    })

    it('a driver reads the window once, then only what was added, and holds what a fresh read would', async () => {
      const window = new TranscriptWindow(store, conversationId, 20_000)
      const first = await window.read()
      expect(first).toEqual(await readTranscriptTail(store, conversationId, 20_000))
      // A round adds an assistant turn with a call and its result, then a long one that pushes old turns out.
      const assistant = newId()
      await testDb(store)
        .insertInto('messages')
        .values({
          id: assistant,
          conversation_id: conversationId,
          role: 'assistant',
          content: 'calling',
          tool_calls: JSON.stringify([{ callId: 'c1', providerCallId: 'p1', name: 'x', arguments: '{"a": 1}' }]),
          status: 'completed',
        })
        .execute()
      await testDb(store)
        .insertInto('messages')
        .values({
          id: newId(),
          conversation_id: conversationId,
          role: 'tool',
          content: 'result',
          tool_call_id: 'c1',
          status: 'completed',
        })
        .execute()
      await testDb(store)
        .insertInto('messages')
        .values({
          id: newId(),
          conversation_id: conversationId,
          role: 'assistant',
          content: 'y'.repeat(5_000),
          status: 'completed',
        })
        .execute()
      const later = await window.read()
      const fresh = await readTranscriptTail(store, conversationId, 20_000)
      expect(later).toEqual(fresh)
      expect(later.length).toBeLessThan(first.length + 3)
      expect(later.find((message) => message.id === assistant)?.toolCalls).toEqual([
        { callId: 'c1', providerCallId: 'p1', name: 'x', arguments: '{"a": 1}' },
      ])
      // Nothing new: nothing changes.
      expect(await window.read()).toEqual(fresh)
    })

    it('the reads that ride in other statements (a run start, a round opening) hold what a fresh read would', async () => {
      // A run started in the idle conversation reads its window in the same statement (emoji and CJK count as the database counts them).
      const input = 'and 🙂 再一次 — the window?'
      const started = await store.createRun(
        {
          conversationId,
          projectId: (
            await testDb(store)
              .selectFrom('conversations')
              .select('project_id')
              .where('id', '=', conversationId)
              .executeTakeFirstOrThrow()
          ).project_id,
          ownerId: alice.user.id,
          model: 'small',
          maxIterations: 1,
          approvalPolicy: 'ask',
          clientTools: [],
          input,
          view: runView,
        },
        {
          lease: { owner: 'test.1', expiresAt: new Date(Date.now() + 60_000) },
          allowQueue: false,
          prefetch: { maxChars: 20_000 },
        },
      )
      if (!('run' in started)) throw new Error('the conversation has an active run')
      expect(started.prefetched?.hasKnowledge).toBe(false)
      const window = new TranscriptWindow(store, conversationId, 20_000)
      window.seed(started.prefetched!.transcript)
      expect(window.extend([])).toEqual(await readTranscriptTail(store, conversationId, 20_000))
      expect(window.extend([]).at(-1)).toMatchObject({ role: 'user', content: input })
      // What was added after it, read inside another statement (as the round's opening carries it).
      await testDb(store)
        .insertInto('messages')
        .values({
          id: newId(),
          conversation_id: conversationId,
          role: 'assistant',
          content: '答 🙂'.repeat(2_000),
          status: 'completed',
        })
        .execute()
      const { rows } = await sql<{ added: unknown }>`select (${window.addedRead()!}) as added`.execute(testDb(store))
      expect(window.extend(transcriptRowsFromJson(rows[0]!.added))).toEqual(
        await readTranscriptTail(store, conversationId, 20_000),
      )
      await testDb(store)
        .updateTable('runs')
        .set({ status: 'completed', lease_owner: null })
        .where('id', '=', started.run.id)
        .execute()
    })
  })
}
