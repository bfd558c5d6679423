import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import {
  fakeOpenAIModel,
  openaiChunk,
  openaiToolCallChunks,
  startFakeUpstream,
  type FakeUpstream,
} from './helpers/fake-upstream.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// Usage and cost (docs/guides/operating.md#usage-and-cost): every model call's tokens as the provider's
// stream reported them, priced by the configured table, on the run, its terminal event, GET /api/usage
// and the Prometheus counters.

/** A text answer whose usage chunk carries OpenAI's details: cached prompt tokens and reasoning tokens. */
function answerWithUsage(
  text: string,
  usage: { prompt: number; cached: number; completion: number; reasoning: number },
) {
  return [
    openaiChunk({ role: 'assistant', content: '' }),
    openaiChunk({ content: text }),
    openaiChunk({}, 'stop'),
    {
      id: 'chatcmpl-usage',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'gpt-test',
      choices: [],
      usage: {
        prompt_tokens: usage.prompt,
        completion_tokens: usage.completion,
        total_tokens: usage.prompt + usage.completion,
        prompt_tokens_details: { cached_tokens: usage.cached },
        completion_tokens_details: { reasoning_tokens: usage.reasoning },
      },
    },
  ]
}

const adminToken = 'usage-admin-token-0123456789'

for (const engine of apiEngines()) {
  describe(`usage and cost (${engine})`, () => {
    let store: Store
    let server: TestServer
    let upstream: FakeUpstream
    let alice: TestUser
    let bob: TestUser
    let projectId: string

    const model = (id: string) => fakeOpenAIModel(upstream, id)

    beforeAll(async () => {
      upstream = await startFakeUpstream()
      store = await openTestStore(engine)
      server = await startTestServer(store, {
        adminToken,
        plugins: ['rdm'],
        models: [model('priced'), model('free')],
        // 2 per million input, 0.5 per million cached input, 8 per million output; `free` has no price.
        prices: new Map([['priced', { inputPerMillion: 2, cachedInputPerMillion: 0.5, outputPerMillion: 8 }]]),
      })
      alice = await server.createUser()
      bob = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'usage' } })).body
        .id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
      await upstream?.close()
    })

    /** Starts a run and waits for its end; returns the run and its terminal event's data. */
    const runToEnd = async (user: TestUser, project: string, modelId: string) => {
      const conversationId = (
        await server.request('POST', `/api/projects/${project}/conversations`, { token: user.token, body: {} })
      ).body.id
      const response = await fetch(`${server.url}/api/conversations/${conversationId}/runs`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${user.token}`,
          'content-type': 'application/json',
          accept: 'text/event-stream',
        },
        body: JSON.stringify({ input: 'hello', model: modelId }),
      })
      const stream = await response.text()
      const frames = stream.split('\n\n').map((frame) => ({
        event: /^event: (.*)$/m.exec(frame)?.[1],
        data: /^data: (.*)$/m.exec(frame)?.[1],
      }))
      const terminal = frames.find((frame) => frame.event === 'run.completed' || frame.event === 'run.failed')
      const created = frames.find((frame) => frame.event === 'run.created')
      const runId = (JSON.parse(created!.data!) as { run: { id: string } }).run.id
      const run = (await server.request('GET', `/api/runs/${runId}`, { token: user.token })).body
      return { run, terminal: terminal && (JSON.parse(terminal.data!) as Record<string, unknown>) }
    }

    it('counts every call of a run (cached input and reasoning included) and prices it', async () => {
      // Round 1 asks for a tool (20 in, 12 out by the helper's usage chunk); round 2 answers.
      upstream.enqueue({
        kind: 'openai-stream',
        chunks: openaiToolCallChunks([{ id: 'c1', name: 'rdm__ping', arguments: '{"target":"Paris"}' }]),
      })
      upstream.enqueue({
        kind: 'openai-stream',
        chunks: answerWithUsage('done', { prompt: 1000, cached: 400, completion: 200, reasoning: 50 }),
      })
      const { run, terminal } = await runToEnd(alice, projectId, 'priced')
      expect(run.status).toBe('completed')
      const cost = (20 * 2 + 12 * 8 + 600 * 2 + 400 * 0.5 + 200 * 8) / 1_000_000
      const expected = {
        inputTokens: 1020,
        outputTokens: 212,
        cachedInputTokens: 400,
        reasoningTokens: 50,
        modelCalls: 2,
      }
      expect(run.usage).toMatchObject(expected)
      expect(run.usage.cost).toBeCloseTo(cost, 12)
      expect(terminal).toMatchObject({ usage: expected })
    })

    it('a model without a price costs null, never a crash; a failed call counts and its event carries usage', async () => {
      upstream.enqueue({
        kind: 'openai-stream',
        chunks: answerWithUsage('free answer', { prompt: 30, cached: 0, completion: 10, reasoning: 0 }),
      })
      const free = await runToEnd(alice, projectId, 'free')
      const totals = {
        inputTokens: 30,
        outputTokens: 10,
        cachedInputTokens: 0,
        reasoningTokens: 0,
        modelCalls: 1,
        cost: null,
      }
      expect(free.run.usage).toEqual({ ...totals, byModel: { free: totals } })
      upstream.enqueue({ kind: 'error', status: 400, body: { error: { message: 'bad request', type: 'invalid' } } })
      const failed = await runToEnd(alice, projectId, 'priced')
      expect(failed.run.status).toBe('failed')
      expect(failed.terminal).toMatchObject({ usage: { modelCalls: 1, inputTokens: 0, cost: 0 } })
    })

    it('GET /api/usage reports the caller’s own calls, grouped and paged; the admin API reports anyone', async () => {
      const mine = await server.request('GET', '/api/usage?groupBy=model', { token: alice.token })
      expect(mine.status).toBe(200)
      expect(mine.body).toMatchObject({ currency: 'USD', groupBy: 'model', nextCursor: null })
      expect(mine.body.totals).toMatchObject({ modelCalls: 4, inputTokens: 1050, outputTokens: 222, unpricedCalls: 1 })
      expect(mine.body.groups.map((group: { key: string }) => group.key)).toEqual(['free', 'priced'])
      expect(mine.body.groups[0]).toMatchObject({ key: 'free', modelCalls: 1, cost: null, unpricedCalls: 1 })
      expect(mine.body.groups[1].cost).toBeCloseTo(mine.body.totals.cost, 12)

      // Paged by key.
      const first = await server.request('GET', '/api/usage?groupBy=model&limit=1', { token: alice.token })
      expect(first.body.groups.map((group: { key: string }) => group.key)).toEqual(['free'])
      expect(first.body.nextCursor).toEqual(expect.any(String))
      const second = await server.request('GET', `/api/usage?groupBy=model&limit=1&cursor=${first.body.nextCursor}`, {
        token: alice.token,
      })
      expect(second.body.groups.map((group: { key: string }) => group.key)).toEqual(['priced'])
      expect(second.body.nextCursor).toBeNull()
      // A cursor this server did not issue is refused, as on every list.
      const forged = await server.request('GET', '/api/usage?groupBy=model&cursor=xyz', { token: alice.token })
      expect([forged.status, forged.body.code]).toEqual([400, 'invalid_cursor'])
      const ungrouped = await server.request('GET', '/api/usage?cursor=xyz', { token: alice.token })
      expect([ungrouped.status, ungrouped.body.code]).toEqual([400, 'invalid_cursor'])

      // By UTC day and month (the calls were all made just now), and by run.
      const today = new Date().toISOString().slice(0, 10)
      const byDay = await server.request('GET', '/api/usage?groupBy=day', { token: alice.token })
      const byMonth = await server.request('GET', '/api/usage?groupBy=month', { token: alice.token })
      const byRun = await server.request('GET', '/api/usage?groupBy=run', { token: alice.token })
      // A day or month may turn over between the calls and the report: then there are two groups.
      expect(byDay.body.groups.at(-1).key >= today).toBe(true)
      expect(byMonth.body.groups.at(-1).key >= today.slice(0, 7)).toBe(true)
      for (const report of [byDay, byMonth])
        expect(
          report.body.groups.reduce((sum: number, group: { modelCalls: number }) => sum + group.modelCalls, 0),
        ).toBe(4)
      expect(byRun.body.groups).toHaveLength(3)

      // A time window: nothing yet in the future.
      const later = await server.request('GET', `/api/usage?from=${encodeURIComponent('2999-01-01T00:00:00Z')}`, {
        token: alice.token,
      })
      expect(later.body.totals).toMatchObject({ modelCalls: 0, cost: null })

      // Bob sees only his own (nothing), and not Alice's.
      const bobs = await server.request('GET', '/api/usage', { token: bob.token })
      expect(bobs.body.totals.modelCalls).toBe(0)
      const peek = await server.request('GET', `/api/usage?userId=${alice.user.id}`, { token: bob.token })
      expect(peek.status).toBe(403)
      expect(peek.body.code).toBe('forbidden')
      // Alice's project is not Bob's to name: not found, as any route answers.
      const theirs = await server.request('GET', `/api/usage?projectId=${projectId}`, { token: bob.token })
      expect([theirs.status, theirs.body.code]).toEqual([404, 'not_found'])
      expect((await server.request('GET', `/api/usage?projectId=${projectId}`, { token: alice.token })).status).toBe(
        200,
      )

      // The operator: one user, or everyone grouped by user.
      const admin = await server.request('GET', `/api/admin/usage?userId=${alice.user.id}`, { token: adminToken })
      expect(admin.status).toBe(200)
      expect(admin.body.totals.modelCalls).toBe(4)
      const byUser = await server.request('GET', '/api/admin/usage?groupBy=user', { token: adminToken })
      expect(byUser.body.groups.find((group: { key: string }) => group.key === alice.user.id)).toMatchObject({
        modelCalls: 4,
      })
      expect((await server.request('GET', '/api/admin/usage', { token: alice.token })).status).toBe(401)
      // A user is named by id: a name (or anything else) is refused, not answered with an empty report.
      const byName = await server.request('GET', '/api/admin/usage?userId=alice', { token: adminToken })
      expect([byName.status, byName.body.code]).toEqual([400, 'validation_failed'])
    })

    it('refuses bad report requests with stable codes', async () => {
      const bad = [
        '/api/usage?groupBy=planet',
        '/api/usage?from=yesterday',
        `/api/usage?from=${encodeURIComponent('0000-01-01T00:00:00Z')}`,
        '/api/usage?limit=0',
        `/api/usage?from=${encodeURIComponent('2026-02-01T00:00:00Z')}&to=${encodeURIComponent('2026-01-01T00:00:00Z')}`,
      ]
      for (const path of bad) {
        const answer = await server.request('GET', path, { token: alice.token })
        expect(answer.status, path).toBe(400)
        expect(answer.body.code, path).toBe('validation_failed')
      }
    })

    it('exports tokens and cost as Prometheus counters', async () => {
      const metrics = (await server.request('GET', '/metrics')).body as string
      expect(metrics).toMatch(/plinth_llm_tokens_total\{model="priced",kind="cached_input"\} 400/)
      expect(metrics).toMatch(/plinth_llm_tokens_total\{model="priced",kind="reasoning"\} 50/)
      expect(metrics).toMatch(/plinth_llm_cost_total\{model="priced"\} 0\.00/)
      expect(metrics).not.toMatch(/plinth_llm_cost_total\{model="free"\}/)
    })
  })
}
