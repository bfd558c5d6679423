import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { apiEngines, createTestDatabase, openTestStore, testEngines, type TestDatabase } from './helpers/engines.js'
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

// Project and user budgets per UTC day and month (docs/guides/operating.md#budgets): checked before each
// model call with what every instance's calls spent, and before new runs (429 budget_exceeded).

const adminToken = 'admin-token-for-the-period-budget-tests'

/** A tool call (so the loop goes on) whose usage chunk reports `tokens` in and `tokens` out. */
function toolCallCosting(tokens: number): object[] {
  const chunks = openaiToolCallChunks([{ id: 'c', name: 'rdm__ping', arguments: '{"target":"Paris"}' }])
  chunks[chunks.length - 1] = openaiUsageChunk(tokens, tokens)
  return chunks
}

/** A final answer of `tokens` in and `tokens` out. */
function answerCosting(tokens: number): object[] {
  return openaiTextChunks('Done.', 1, { prompt: tokens, completion: tokens })
}

function serverOptions(upstream: FakeUpstream) {
  return {
    plugins: ['rdm'],
    adminToken,
    models: [
      new ScriptedModel({
        id: 'looper',
        turns: [{ toolCalls: [{ name: 'rdm__ping', arguments: { target: 'Paris' } }] }],
        whenExhausted: 'loop',
      }),
      fakeOpenAIModel(upstream, 'priced'),
    ],
    // 1 per million tokens either way: a call of 1,000 in and 1,000 out costs 0.002.
    prices: new Map([['priced', { inputPerMillion: 1, outputPerMillion: 1 }]]),
  }
}

/** 00:00 UTC tomorrow, and the first of next month: when daily and monthly budgets reset. */
function nextResets(): { daily: string; monthly: string } {
  const now = new Date()
  return {
    daily: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1)).toISOString(),
    monthly: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)).toISOString(),
  }
}

async function newConversation(server: TestServer, token: string, projectId: string): Promise<string> {
  const created = await server.request('POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
  return created.body.id as string
}

async function startRun(server: TestServer, token: string, projectId: string, body: Record<string, unknown>) {
  return server.request('POST', `/api/conversations/${await newConversation(server, token, projectId)}/runs`, {
    token,
    body: { input: 'go', maxIterations: 100, ...body },
  })
}

for (const engine of apiEngines()) {
  describe(`project and user budgets per day and month (${engine})`, () => {
    let store: Store
    let server: TestServer
    let upstream: FakeUpstream
    let alice: TestUser

    beforeAll(async () => {
      upstream = await startFakeUpstream()
      store = await openTestStore(engine)
      server = await startTestServer(store, serverOptions(upstream))
      alice = await server.createUser()
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
      await upstream?.close()
    })

    const newProject = async (user: TestUser, budget?: unknown): Promise<string> => {
      const created = await server.request('POST', '/api/projects', {
        token: user.token,
        body: { name: `p${Date.now()}`, ...(budget !== undefined && { budget }) },
      })
      expect(created.status).toBe(201)
      return created.body.id as string
    }

    it('a project over its daily cost: the run ends at the crossing, new runs get 429 until it is raised', async () => {
      const projectId = await newProject(alice)
      const patched = await server.request('PATCH', `/api/projects/${projectId}`, {
        token: alice.token,
        body: { budget: { daily: { maxCost: 0.005 } } },
      })
      expect(patched.status).toBe(200)
      expect(patched.body.budget).toEqual({ daily: { maxCost: 0.005 } })

      for (let call = 0; call < 4; call++) upstream.enqueue({ kind: 'openai-stream', chunks: toolCallCosting(1000) })
      const created = await startRun(server, alice.token, projectId, { model: 'priced' })
      expect(created.status).toBe(201)
      const runId = created.body.id as string
      const failed = await waitForRun(server, alice.token, runId, ['failed'])
      // 0.002 per call: after two 0.004 (the third still fits), after three 0.006 — no fourth.
      expect(failed.error).toMatchObject({
        code: 'budget_exceeded',
        budget: { scope: 'project', period: 'daily', limit: 'maxCost', value: 0.005, resetAt: nextResets().daily },
      })
      expect((failed.error as { budget: { used: number } }).budget.used).toBeCloseTo(0.006, 9)
      expect(failed.usage).toMatchObject({ modelCalls: 3 })
      expect(upstream.clear()).toBe(1)

      // New runs in the project are refused until the day resets (or the budget is raised).
      const refused = await startRun(server, alice.token, projectId, { model: 'priced' })
      expect(refused.status).toBe(429)
      expect(refused.headers.get('content-type')).toMatch(/application\/problem\+json/)
      expect(refused.body).toMatchObject({
        code: 'budget_exceeded',
        resetAt: nextResets().daily,
        budget: { scope: 'project', period: 'daily', limit: 'maxCost', value: 0.005 },
      })
      const retryAfter = Number(refused.headers.get('retry-after'))
      expect(retryAfter).toBeGreaterThan(0)
      expect(retryAfter).toBeLessThanOrEqual(86_400)
      const notYet = await server.request('POST', `/api/runs/${runId}/resume`, { token: alice.token })
      expect(notYet.status).toBe(429)
      expect(notYet.body.code).toBe('budget_exceeded')
      // Nor does a forced compaction spend on a summary call.
      upstream.enqueue({ kind: 'openai-stream', chunks: answerCosting(10) })
      const compact = await server.request('POST', `/api/conversations/${created.body.conversationId}/compact`, {
        token: alice.token,
        body: { model: 'priced' },
      })
      expect([compact.status, compact.body.code]).toEqual([429, 'budget_exceeded'])
      expect(compact.headers.get('retry-after')).toBeTruthy()
      expect(upstream.clear()).toBe(1)

      // Raised: the run resumes and finishes.
      await server.request('PATCH', `/api/projects/${projectId}`, {
        token: alice.token,
        body: { budget: { daily: { maxCost: 1 } } },
      })
      upstream.enqueue({ kind: 'openai-stream', chunks: answerCosting(10) })
      const resumed = await server.request('POST', `/api/runs/${runId}/resume`, { token: alice.token })
      expect(resumed.status).toBe(200)
      const completed = await waitForRun(server, alice.token, runId, ['completed'])
      expect(completed.usage).toMatchObject({ modelCalls: 4 })

      // The stop is in the audit chain, and so are the budget's changes.
      const audit = await server.request('GET', `/api/audit?projectId=${projectId}&limit=200`, { token: alice.token })
      const items = audit.body.items as Array<Record<string, unknown>>
      expect(items.find((entry) => entry.commandId === 'core.budget_stop')).toMatchObject({
        error: { code: 'budget_exceeded', budget: { scope: 'project', period: 'daily' } },
      })
    })

    it("an operator's budget for a user holds on every project of theirs", async () => {
      const bob = await server.createUser()
      // Bob's token is cached with his user from here: the change must still show at once.
      expect((await server.request('GET', '/api/me', { token: bob.token })).body.budget).toBeNull()
      const set = await server.request('PATCH', `/api/admin/users/${bob.user.id}`, {
        token: adminToken,
        body: { budget: { monthly: { maxTokens: 3_000 } } },
      })
      expect(set.status).toBe(200)
      expect(set.body).toMatchObject({ id: bob.user.id, disabled: false, budget: { monthly: { maxTokens: 3_000 } } })
      expect((await server.request('GET', '/api/me', { token: bob.token })).body.budget).toEqual({
        monthly: { maxTokens: 3_000 },
      })
      // A user cannot lift their own cap.
      const own = await server.request('PATCH', `/api/admin/users/${bob.user.id}`, {
        token: bob.token,
        body: { budget: null },
      })
      expect(own.status).toBe(401)

      const first = await newProject(bob)
      const second = await newProject(bob)
      upstream.enqueue({ kind: 'openai-stream', chunks: answerCosting(1_000) })
      const one = await startRun(server, bob.token, first, { model: 'priced' })
      await waitForRun(server, bob.token, one.body.id as string, ['completed'])
      // 2,000 of 3,000 spent: the next call still fits, and the one after does not.
      upstream.enqueue({ kind: 'openai-stream', chunks: toolCallCosting(1_000) })
      upstream.enqueue({ kind: 'openai-stream', chunks: toolCallCosting(1_000) })
      const two = await startRun(server, bob.token, second, { model: 'priced' })
      const stopped = await waitForRun(server, bob.token, two.body.id as string, ['failed'])
      expect(stopped.error).toMatchObject({
        code: 'budget_exceeded',
        budget: { scope: 'user', period: 'monthly', limit: 'maxTokens', value: 3_000, used: 4_000 },
      })
      expect(upstream.clear()).toBe(1)
      const refused = await startRun(server, bob.token, first, { model: 'looper' })
      expect(refused.status).toBe(429)
      expect(refused.body).toMatchObject({ code: 'budget_exceeded', resetAt: nextResets().monthly })
      // Others are not held by bob's budget.
      const others = await startRun(server, alice.token, await newProject(alice), {
        model: 'looper',
        budget: { maxModelCalls: 1 },
      })
      expect(others.status).toBe(201)

      const lifted = await server.request('PATCH', `/api/admin/users/${bob.user.id}`, {
        token: adminToken,
        body: { budget: null },
      })
      expect(lifted.body.budget).toBeNull()
      const again = await startRun(server, bob.token, first, { model: 'looper', budget: { maxModelCalls: 1 } })
      expect(again.status).toBe(201)
      await waitForRun(server, bob.token, again.body.id as string, ['failed'])
    })

    it("a project's run budget is its runs' default; bad budgets are refused", async () => {
      const projectId = await newProject(alice, { run: { maxModelCalls: 2 } })
      const run = await startRun(server, alice.token, projectId, { model: 'looper' })
      expect(run.body.budget).toEqual({ maxModelCalls: 2 })
      const failed = await waitForRun(server, alice.token, run.body.id as string, ['failed'])
      expect(failed.error).toMatchObject({ code: 'budget_exceeded', budget: { scope: 'run', value: 2 } })
      // The request's own limit wins.
      const own = await startRun(server, alice.token, projectId, { model: 'looper', budget: { maxModelCalls: 1 } })
      expect(own.body.budget).toEqual({ maxModelCalls: 1 })
      await waitForRun(server, alice.token, own.body.id as string, ['failed'])

      for (const budget of [
        { daily: { maxCost: -1 } },
        { daily: { maxTokens: 0 } },
        { weekly: { maxCost: 1 } },
        { monthly: { maxCost: 1, maxCalls: 3 } },
        { run: { maxModelCalls: 0 } },
      ]) {
        const bad = await server.request('PATCH', `/api/projects/${projectId}`, {
          token: alice.token,
          body: { budget },
        })
        expect(bad.status, JSON.stringify(budget)).toBe(400)
        expect(bad.body.code).toBe('validation_failed')
      }
      const empty = await server.request('PATCH', `/api/admin/users/${alice.user.id}`, { token: adminToken, body: {} })
      expect(empty.status).toBe(400)
      const nobody = await server.request('PATCH', '/api/admin/users/01ARZ3NDEKTSV4RRFFQ69G5FAV', {
        token: adminToken,
        body: { budget: { daily: { maxCost: 1 } } },
      })
      expect(nobody.status).toBe(404)
      const cleared = await server.request('PATCH', `/api/projects/${projectId}`, {
        token: alice.token,
        body: { budget: null },
      })
      expect(cleared.body.budget).toBeNull()
    })
  })
}

const engines = testEngines()
if (!engines.includes('postgres'))
  console.warn('[plinth tests] skipping the two-instance budget test: it needs Postgres (TEST_DATABASE_URL)')

describe.skipIf(!engines.includes('postgres'))('a project budget across two instances on one Postgres', () => {
  let database: TestDatabase
  const stores: Store[] = []
  const servers: TestServer[] = []
  let upstream: FakeUpstream

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    database = await createTestDatabase('postgres')
    for (let instance = 0; instance < 2; instance++) {
      const store = await database.open()
      stores.push(store)
      servers.push(await startTestServer(store, serverOptions(upstream)))
    }
  })
  afterAll(async () => {
    for (const server of servers) await server.close()
    for (const store of stores) await store.close()
    await database?.drop()
    await upstream?.close()
  })

  it("counts both instances' calls: the run ends when the project's spending crosses it, wherever it runs", async () => {
    const [a, b] = servers as [TestServer, TestServer]
    const carol = await a.createUser()
    const projectId = (
      await a.request('POST', '/api/projects', {
        token: carol.token,
        body: { name: 'shared budget', budget: { daily: { maxCost: 0.005 } } },
      })
    ).body.id as string
    // 0.002 spent through a, then 0.002 through b.
    upstream.enqueue({ kind: 'openai-stream', chunks: answerCosting(1_000) })
    const first = await startRun(a, carol.token, projectId, { model: 'priced' })
    await waitForRun(a, carol.token, first.body.id as string, ['completed'])
    upstream.enqueue({ kind: 'openai-stream', chunks: answerCosting(1_000) })
    const second = await startRun(b, carol.token, projectId, { model: 'priced' })
    await waitForRun(b, carol.token, second.body.id as string, ['completed'])
    // On a: one more call fits (0.004 spent), the one after would cross.
    upstream.enqueue({ kind: 'openai-stream', chunks: toolCallCosting(1_000) })
    upstream.enqueue({ kind: 'openai-stream', chunks: toolCallCosting(1_000) })
    const third = await startRun(a, carol.token, projectId, { model: 'priced' })
    const failed = await waitForRun(a, carol.token, third.body.id as string, ['failed'])
    expect(failed.error).toMatchObject({ code: 'budget_exceeded', budget: { scope: 'project', period: 'daily' } })
    expect((failed.error as { budget: { used: number } }).budget.used).toBeCloseTo(0.006, 9)
    expect(failed.usage).toMatchObject({ modelCalls: 1 })
    expect(upstream.clear()).toBe(1)
    // b refuses new runs too; raised through b, the run resumes on b and finishes.
    const refused = await startRun(b, carol.token, projectId, { model: 'priced' })
    expect(refused.status).toBe(429)
    await b.request('PATCH', `/api/projects/${projectId}`, {
      token: carol.token,
      body: { budget: { daily: { maxCost: 0.05 } } },
    })
    upstream.enqueue({ kind: 'openai-stream', chunks: answerCosting(10) })
    expect((await b.request('POST', `/api/runs/${third.body.id}/resume`, { token: carol.token })).status).toBe(200)
    await waitForRun(b, carol.token, third.body.id as string, ['completed'])
  })
})
