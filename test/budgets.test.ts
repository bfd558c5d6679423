import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import {
  fakeOpenAIModel,
  openaiTextChunks,
  openaiToolCallChunks,
  openaiUsageChunk,
  startFakeUpstream,
  type FakeUpstream,
} from './helpers/fake-upstream.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// Run budgets (docs/guides/operating.md#budgets): checked before each model call; a run that would cross
// one fails `budget_exceeded`, naming it, and resumes once it is raised.

/** A tool call (so the loop goes on) whose usage chunk reports `tokens` in and `tokens` out. */
function toolCallCosting(tokens: number): object[] {
  const chunks = openaiToolCallChunks([{ id: 'c', name: 'rdm__ping', arguments: '{"target":"Paris"}' }])
  chunks[chunks.length - 1] = openaiUsageChunk(tokens, tokens)
  return chunks
}

for (const engine of apiEngines()) {
  describe(`run budgets (${engine})`, () => {
    let store: Store
    let server: TestServer
    let upstream: FakeUpstream
    let alice: TestUser
    let projectId: string

    beforeAll(async () => {
      upstream = await startFakeUpstream()
      store = await openTestStore(engine)
      server = await startTestServer(store, {
        plugins: ['rdm'],
        models: [
          // Would call a tool for ever.
          new ScriptedModel({
            id: 'looper',
            turns: [{ toolCalls: [{ name: 'rdm__ping', arguments: { target: 'Paris' } }] }],
            whenExhausted: 'loop',
          }),
          fakeOpenAIModel(upstream, 'priced'),
        ],
        // 1 per million tokens either way: a call of 1,000 in and 1,000 out costs 0.002.
        prices: new Map([['priced', { inputPerMillion: 1, outputPerMillion: 1 }]]),
        runBudget: { maxModelCalls: 40 },
      })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'budgets' } }))
        .body.id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
      await upstream?.close()
    })

    const startRun = async (body: Record<string, unknown>) => {
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
      return server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'go', maxIterations: 100, ...body },
      })
    }

    it('a model that would loop for ever stops at maxModelCalls; raising the budget resumes it', async () => {
      const created = await startRun({ model: 'looper', budget: { maxModelCalls: 3 } })
      expect(created.status).toBe(201)
      expect(created.body.budget).toEqual({ maxModelCalls: 3 })
      const runId = created.body.id as string
      const failed = await waitForRun(server, alice.token, runId, ['failed'])
      expect(failed.error).toMatchObject({
        code: 'budget_exceeded',
        budget: { scope: 'run', limit: 'maxModelCalls', value: 3, used: 3 },
      })
      expect(failed.usage).toMatchObject({ modelCalls: 3 })
      const events = await server.request('GET', `/api/runs/${runId}/events`, {
        token: alice.token,
        headers: { accept: 'text/event-stream' },
      })
      expect(String(events.body)).toMatch(/event: run\.failed\ndata: .*"budget_exceeded"/)

      // Not resumable until it is raised.
      const again = await server.request('POST', `/api/runs/${runId}/resume`, { token: alice.token })
      expect(again.status).toBe(409)
      expect(again.body.code).toBe('run_not_resumable')
      expect(again.body.detail).toMatch(/maxModelCalls/)

      const raised = await server.request('POST', `/api/runs/${runId}/resume`, {
        token: alice.token,
        body: { budget: { maxModelCalls: 5 } },
      })
      expect(raised.status).toBe(200)
      expect(raised.body.budget).toEqual({ maxModelCalls: 5 })
      const stopped = await waitForRun(server, alice.token, runId, ['failed'])
      expect(stopped.error).toMatchObject({ code: 'budget_exceeded', budget: { value: 5, used: 5 } })
      expect(stopped.usage).toMatchObject({ modelCalls: 5 })

      // Each stop is in the audit chain, with the budget it hit.
      const audit = await server.request('GET', `/api/audit?conversationId=${created.body.conversationId}`, {
        token: alice.token,
      })
      const stops = (audit.body.items as Array<Record<string, unknown>>).filter(
        (entry) => entry.commandId === 'core.budget_stop',
      )
      expect(stops).toHaveLength(2)
      expect(stops[0]).toMatchObject({
        status: 'failed',
        entrance: 'agent',
        error: { code: 'budget_exceeded', budget: { limit: 'maxModelCalls', value: 5 } },
      })
    })

    it('maxCost ends a priced run once its calls have spent it', async () => {
      for (let call = 0; call < 4; call++) upstream.enqueue({ kind: 'openai-stream', chunks: toolCallCosting(1000) })
      const created = await startRun({ model: 'priced', budget: { maxCost: 0.005 } })
      expect(created.status).toBe(201)
      const failed = await waitForRun(server, alice.token, created.body.id as string, ['failed'])
      // 0.002 per call: after two 0.004 (the third still fits), after three 0.006 — no fourth.
      expect(failed.error).toMatchObject({ code: 'budget_exceeded', budget: { limit: 'maxCost', value: 0.005 } })
      expect((failed.error as { budget: { used: number } }).budget.used).toBeCloseTo(0.006, 9)
      expect(failed.usage).toMatchObject({ modelCalls: 3 })
      expect(upstream.clear()).toBe(1)
    })

    it('a run’s cost is summed as a person would write it, not with binary float noise', async () => {
      // 600 in and 600 out at 1 per million each way: 0.0012 a call; five calls are 0.006, not 0.005999….
      for (let call = 0; call < 4; call++) upstream.enqueue({ kind: 'openai-stream', chunks: toolCallCosting(600) })
      upstream.enqueue({
        kind: 'openai-stream',
        chunks: openaiTextChunks('Done.', 1, { prompt: 600, completion: 600 }),
      })
      const created = await startRun({ model: 'priced' })
      const run = await waitForRun(server, alice.token, created.body.id as string, ['completed'])
      expect(run.usage).toMatchObject({ modelCalls: 5, cost: 0.006, byModel: { priced: { cost: 0.006 } } })
    })

    it('maxTokens stops before a call whose prompt alone would cross it', async () => {
      const created = await startRun({ model: 'looper', budget: { maxTokens: 1 } })
      const failed = await waitForRun(server, alice.token, created.body.id as string, ['failed'])
      expect(failed.error).toMatchObject({ code: 'budget_exceeded', budget: { limit: 'maxTokens', used: 0 } })
      expect(failed.usage).toMatchObject({ modelCalls: 0 })
    })

    it("takes the server's default, refuses a cost limit on a model without a price and absurd limits", async () => {
      const byDefault = await startRun({ model: 'looper', budget: { maxTokens: 1_000_000 } })
      expect(byDefault.body.budget).toEqual({ maxModelCalls: 40, maxTokens: 1_000_000 })
      await server.runs.cancel(byDefault.body.id as string)
      const unpriced = await startRun({ model: 'looper', budget: { maxCost: 1 } })
      expect(unpriced.status).toBe(400)
      expect(unpriced.body).toMatchObject({ code: 'validation_failed' })
      expect(unpriced.body.detail).toMatch(/maxCost needs a price/)
      for (const budget of [{ maxModelCalls: 0 }, { maxCost: -1 }, { maxTokens: 1.5 }, { maxCalls: 3 }]) {
        const bad = await startRun({ model: 'looper', budget })
        expect(bad.status, JSON.stringify(budget)).toBe(400)
        expect(bad.body.code).toBe('validation_failed')
      }
    })
  })
}
