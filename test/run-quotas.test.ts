import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// Run quotas (docs/guides/operating.md#run-quotas): runs queued or running per project, runs started per
// minute per user and per project, and a project's own quota set by the operator — counted in the
// database, refused 429 too_many_runs naming the quota, with Retry-After.

const adminToken = 'admin-token-for-the-run-quota-tests'

for (const engine of apiEngines()) {
  describe(`run quotas (${engine})`, () => {
    let store: Store
    let server: TestServer

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, {
        adminToken,
        models: [
          // Streams for about a minute unless cancelled: a run that stays running.
          new ScriptedModel({
            id: 'slow',
            turns: [{ text: 'x '.repeat(600), chunks: 600, delayMs: 100 }],
            whenExhausted: 'loop',
          }),
          new ScriptedModel({ id: 'quick', turns: [{ text: 'Done.' }], whenExhausted: 'loop' }),
        ],
        runQuota: { maxActiveRunsPerProject: 2, runsPerMinutePerUser: 6 },
      })
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const newProject = async (user: TestUser): Promise<string> =>
      (await server.request('POST', '/api/projects', { token: user.token, body: { name: `q${Date.now()}` } })).body
        .id as string
    const start = async (user: TestUser, projectId: string, model: 'slow' | 'quick') => {
      const conversation = await server.request('POST', `/api/projects/${projectId}/conversations`, {
        token: user.token,
        body: {},
      })
      return server.request('POST', `/api/conversations/${conversation.body.id}/runs`, {
        token: user.token,
        body: { input: 'go', model },
      })
    }
    const cancel = (user: TestUser, runId: string) =>
      server.request('POST', `/api/runs/${runId}/cancel`, { token: user.token })

    it('a project with its most runs active refuses the next, names the quota, and takes it once one ends', async () => {
      const alice = await server.createUser()
      const projectId = await newProject(alice)
      const first = await start(alice, projectId, 'slow')
      const second = await start(alice, projectId, 'slow')
      expect([first.status, second.status]).toEqual([201, 201])

      const refused = await start(alice, projectId, 'slow')
      expect(refused.status).toBe(429)
      expect(refused.body).toMatchObject({
        code: 'too_many_runs',
        quota: { scope: 'project', limit: 'maxActiveRuns', value: 2 },
      })
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0)
      // The quota is the project's: the same user starts runs elsewhere.
      const elsewhere = await start(alice, await newProject(alice), 'quick')
      expect(elsewhere.status).toBe(201)

      await cancel(alice, first.body.id as string)
      const taken = await start(alice, projectId, 'quick')
      expect(taken.status).toBe(201)
      await waitForRun(server, alice.token, taken.body.id as string, ['completed'])
      await cancel(alice, second.body.id as string)
    })

    it("the operator sets a project's own quota; its owner cannot", async () => {
      const bob = await server.createUser()
      const projectId = await newProject(bob)
      const own = await server.request('PATCH', `/api/projects/${projectId}`, {
        token: bob.token,
        body: { quota: { maxActiveRuns: 50 } },
      })
      expect(own.status).toBe(400)
      const notAdmin = await server.request('PATCH', `/api/admin/projects/${projectId}`, {
        token: bob.token,
        body: { quota: { maxActiveRuns: 50 } },
      })
      expect(notAdmin.status).toBe(401)

      const set = await server.request('PATCH', `/api/admin/projects/${projectId}`, {
        token: adminToken,
        body: { quota: { maxActiveRuns: 3 } },
      })
      expect(set.status).toBe(200)
      expect(set.body.quota).toEqual({ maxActiveRuns: 3 })
      expect((await server.request('GET', `/api/projects/${projectId}`, { token: bob.token })).body.quota).toEqual({
        maxActiveRuns: 3,
      })
      const runs = [await start(bob, projectId, 'slow'), await start(bob, projectId, 'slow')]
      const third = await start(bob, projectId, 'slow')
      expect(third.status).toBe(201)
      const fourth = await start(bob, projectId, 'slow')
      expect(fourth.status).toBe(429)
      expect(fourth.body.quota).toEqual({ scope: 'project', limit: 'maxActiveRuns', value: 3 })

      const cleared = await server.request('PATCH', `/api/admin/projects/${projectId}`, {
        token: adminToken,
        body: { quota: null },
      })
      expect(cleared.body.quota).toBeNull()
      for (const run of [...runs, third]) await cancel(bob, run.body.id as string)

      for (const quota of [{ maxActiveRuns: 0 }, { runsPerMinute: 1.5 }, { maxRuns: 3 }]) {
        const bad = await server.request('PATCH', `/api/admin/projects/${projectId}`, {
          token: adminToken,
          body: { quota },
        })
        expect(bad.status, JSON.stringify(quota)).toBe(400)
      }
      const nowhere = await server.request('PATCH', '/api/admin/projects/01ARZ3NDEKTSV4RRFFQ69G5FAV', {
        token: adminToken,
        body: { quota: null },
      })
      expect(nowhere.status).toBe(404)
    })

    it('runs started per minute: per user, and per project as the operator sets it', async () => {
      const carol = await server.createUser()
      const projectId = await newProject(carol)
      for (let run = 0; run < 6; run++) {
        const started = await start(carol, projectId, 'quick')
        expect(started.status).toBe(201)
        await waitForRun(server, carol.token, started.body.id as string, ['completed'])
      }
      const refused = await start(carol, await newProject(carol), 'quick')
      expect(refused.status).toBe(429)
      expect(refused.body).toMatchObject({
        code: 'too_many_runs',
        quota: { scope: 'user', limit: 'runsPerMinute', value: 6 },
      })
      const retryAfter = Number(refused.headers.get('retry-after'))
      expect(retryAfter).toBeGreaterThan(0)
      expect(retryAfter).toBeLessThanOrEqual(60)

      const dave = await server.createUser()
      const shared = await newProject(dave)
      await server.request('PATCH', `/api/admin/projects/${shared}`, {
        token: adminToken,
        body: { quota: { runsPerMinute: 1 } },
      })
      const once = await start(dave, shared, 'quick')
      expect(once.status).toBe(201)
      const again = await start(dave, shared, 'quick')
      expect(again.status).toBe(429)
      expect(again.body.quota).toEqual({ scope: 'project', limit: 'runsPerMinute', value: 1 })
      await waitForRun(server, dave.token, once.body.id as string, ['completed'])
    })
  })
}
