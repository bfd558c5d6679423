import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AnthropicMessagesModel, OpenAIChatModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { sql, testDb } from '../src/store/test-access.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import { anthropicTextEvents, openaiTextChunks, startFakeUpstream, type FakeUpstream } from './helpers/fake-upstream.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// Model fallback (docs/guides/agent-runs.md#model-fallback): a call that fails upstream (429, 5xx,
// overloaded, timeouts) before anything streamed moves to the model's fallbacks; a request error does
// not, and a call that fails after text was streamed is not restarted elsewhere. The run's usage is
// split by the model that answered, and each assistant message names it.
for (const engine of apiEngines()) {
  describe(`model fallback (${engine})`, () => {
    let store: Store
    let server: TestServer
    let primary: FakeUpstream
    let backup: FakeUpstream
    let alice: TestUser
    let projectId: string

    beforeAll(async () => {
      primary = await startFakeUpstream()
      backup = await startFakeUpstream()
      store = await openTestStore(engine)
      server = await startTestServer(store, {
        models: [
          new AnthropicMessagesModel({
            id: 'claude',
            model: 'claude-test',
            baseUrl: primary.url,
            apiKey: 'sk-ant-test-0123456789',
            contextWindow: 100_000,
            supportsTools: true,
            idleTimeoutMs: 2_000,
          }),
          new OpenAIChatModel({
            id: 'backup',
            model: 'gpt-backup',
            baseUrl: `${backup.url}/v1`,
            apiKey: 'sk-test-backup-0123456789',
            contextWindow: 100_000,
            supportsTools: true,
            idleTimeoutMs: 2_000,
          }),
        ],
        prices: new Map([['backup', { inputPerMillion: 1_000, outputPerMillion: 2_000 }]]),
        // No retries on the primary: the first 529 hands the call over.
        fallbacks: { fallbacks: new Map([['claude', ['backup']]]), retries: new Map([['claude', 0]]) },
      })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'fallback' } }))
        .body.id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
      await primary?.close()
      await backup?.close()
    })

    const run = async () => {
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'Hello?', model: 'claude' },
      })
      expect(created.status).toBe(201)
      return waitForRun(server, alice.token, created.body.id as string, ['completed', 'failed'])
    }
    const counts = () => ({ primary: primary.requests.length, backup: backup.requests.length })

    it('a primary that answers 529 (overloaded) hands the call to its fallback; usage is split by model', async () => {
      const before = counts()
      primary.enqueue({
        kind: 'error',
        status: 529,
        body: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } },
      })
      backup.enqueue({
        kind: 'openai-stream',
        chunks: openaiTextChunks('Answered by the backup.', 3, { prompt: 100, completion: 10 }),
      })
      const done = await run()
      expect(done.status).toBe('completed')
      expect(counts()).toEqual({ primary: before.primary + 1, backup: before.backup + 1 })
      expect(done.usage).toMatchObject({
        inputTokens: 100,
        outputTokens: 10,
        modelCalls: 1,
        cost: 0.12,
        byModel: { backup: { inputTokens: 100, outputTokens: 10, modelCalls: 1, cost: 0.12 } },
      })
      expect(Object.keys((done.usage as { byModel: object }).byModel)).toEqual(['backup'])
      const events = String(
        (
          await server.request('GET', `/api/runs/${done.id}/events`, {
            token: alice.token,
            headers: { accept: 'text/event-stream' },
          })
        ).body,
      )
      expect(events).toMatch(/event: message\.completed\ndata: (?=.*"model":"backup")(?=.*Answered by the backup)/)
      // The recorded call names the model that answered.
      const calls = await sql<{ model: string }>`select model from model_calls where run_id = ${done.id}`.execute(
        testDb(store),
      )
      expect(calls.rows).toEqual([{ model: 'backup' }])
    })

    it('the primary answering is used as is: no fallback, usage under its name', async () => {
      const before = counts()
      primary.enqueue({
        kind: 'anthropic-stream',
        events: anthropicTextEvents('From the primary.', 2),
      })
      const done = await run()
      expect(done.status).toBe('completed')
      expect(counts()).toEqual({ primary: before.primary + 1, backup: before.backup })
      expect((done.usage as { byModel: object }).byModel).toEqual({
        claude: expect.objectContaining({ inputTokens: 10, outputTokens: 5, modelCalls: 1, cost: null }),
      })
    })

    it('a request error (400) is not handed over: the run fails with it', async () => {
      const before = counts()
      primary.enqueue({
        kind: 'error',
        status: 400,
        body: { type: 'error', error: { type: 'invalid_request_error', message: 'bad' } },
      })
      const done = await run()
      expect(done.status).toBe('failed')
      expect(done.error).toMatchObject({ code: 'upstream_error', upstreamStatus: 400 })
      expect(counts()).toEqual({ primary: before.primary + 1, backup: before.backup })
    })

    it('a primary that fails mid-stream is not restarted on the fallback: the partial text is kept, marked failed', async () => {
      const before = counts()
      primary.enqueue({
        kind: 'anthropic-stream',
        events: anthropicTextEvents('Half an answer', 2),
        // Frames apart, so the text has reached the server before the connection drops.
        cutAfter: 4,
        delayMs: 50,
      })
      const done = await run()
      expect(done.status).toBe('failed')
      expect(counts()).toEqual({ primary: before.primary + 1, backup: before.backup })
      const messages = await sql<{ content: string; status: string }>`
        select content, status from messages where run_id = ${done.id} and role = 'assistant'`.execute(testDb(store))
      expect(messages.rows).toHaveLength(1)
      expect(messages.rows[0]!.status).toBe('failed')
      expect(messages.rows[0]!.content.length).toBeGreaterThan(0)
    })
  })
}
