import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { testDb } from '../src/store/test-access.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { startTestServer, type TestServer } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// Retention (docs/guides/operating.md#retention): events of runs ended more than
// `retention.runEventsDays` ago are deleted by the sweeper, in batches; the runs, their messages and
// everything else stay, and an event a webhook has yet to render is kept.
for (const engine of testEngines()) {
  describe(`retention of run events (${engine})`, () => {
    let store: Store
    let server: TestServer

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, {
        models: [
          new ScriptedModel({ id: 'quick', turns: [{ text: 'Kept in the transcript.' }], whenExhausted: 'loop' }),
        ],
        retention: { runEventsDays: 7 },
      })
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    it("deletes an old run's events, keeps the run and its messages, and leaves recent runs alone", async () => {
      const alice = await server.createUser()
      const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'r' } }))
        .body.id as string
      const runIn = async () => {
        const conversationId = (
          await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
        ).body.id as string
        const run = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
          token: alice.token,
          body: { input: 'hello', model: 'quick' },
        })
        await waitForRun(server, alice.token, run.body.id as string, ['completed'])
        return { conversationId, runId: run.body.id as string }
      }
      const old = await runIn()
      const recent = await runIn()
      const eventsOf = async (runId: string) =>
        Number(
          (
            await testDb(store)
              .selectFrom('events')
              .select((eb) => eb.fn.countAll().as('n'))
              .where('run_id', '=', runId)
              .executeTakeFirstOrThrow()
          ).n,
        )
      expect(await eventsOf(old.runId)).toBeGreaterThan(3)
      // The old run ended eight days ago; one of its events is still to be rendered by a webhook.
      await testDb(store)
        .updateTable('runs')
        .set({ ended_at: new Date(Date.now() - 8 * 86_400_000) })
        .where('id', '=', old.runId)
        .execute()
      const pending = await testDb(store)
        .selectFrom('events')
        .select('id')
        .where('run_id', '=', old.runId)
        .where('type', '=', 'run.completed')
        .executeTakeFirstOrThrow()
      const hook = await server.request('POST', `/api/projects/${projectId}/webhooks`, {
        token: alice.token,
        body: { url: 'https://hooks.example.com/plinth', events: ['run.completed'] },
      })
      expect(hook.status).toBe(201)
      await testDb(store)
        .insertInto('webhook_messages')
        .values({ webhook_id: hook.body.id as string, event_id: pending.id, event_type: 'run.completed' })
        .execute()
      const recentBefore = await eventsOf(recent.runId)

      const deleted = await server.runs.sweepRetention()
      expect(deleted).toBeGreaterThan(0)
      expect(await eventsOf(old.runId)).toBe(1) // the webhook's, until its first attempt renders it
      expect(await eventsOf(recent.runId)).toBe(recentBefore)
      // The run and its transcript are all there.
      expect((await server.request('GET', `/api/runs/${old.runId}`, { token: alice.token })).body).toMatchObject({
        status: 'completed',
      })
      const messages = await server.request('GET', `/api/conversations/${old.conversationId}/messages`, {
        token: alice.token,
      })
      expect(messages.body.items.map((message: { content: string }) => message.content)).toEqual([
        'hello',
        'Kept in the transcript.',
      ])
      // A second sweep has nothing more to do.
      expect(await server.runs.sweepRetention()).toBe(0)
    })
  })
}
