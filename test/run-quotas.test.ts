import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { sql, testDb as kysely } from '../src/store/test-access.js'
import { apiEngines, createTestDatabase, openTestStore, testEngines, type TestDatabase } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitFor, waitForRun } from './helpers/waits.js'

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

    it('Retry-After names when a run would pass, with more runs in the window than the limit', async () => {
      const erin = await server.createUser()
      const projectId = await newProject(erin)
      const runs: string[] = []
      for (let run = 0; run < 3; run++) {
        const started = await start(erin, projectId, 'quick')
        expect(started.status).toBe(201)
        runs.push(started.body.id as string)
        await waitForRun(server, erin.token, started.body.id as string, ['completed'])
      }
      // The oldest started 50 s ago, the other two now; then the limit drops to 2. The window holds 3:
      // a run passes once two of them have left it, about 60 s from now, not 10 s.
      await sql`update runs set created_at = now() - interval '50 seconds' where id = ${runs[0]!}`.execute(
        kysely(store),
      )
      await server.request('PATCH', `/api/admin/projects/${projectId}`, {
        token: adminToken,
        body: { quota: { runsPerMinute: 2 } },
      })
      const refused = await start(erin, projectId, 'quick')
      expect(refused.status).toBe(429)
      expect(refused.body.quota).toEqual({ scope: 'project', limit: 'runsPerMinute', value: 2 })
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(30)
    })

    it('resuming a run takes a slot: over the cap on runs queued or running it is 429', async () => {
      const frank = await server.createUser()
      const projectId = await newProject(frank)
      // A run that failed before its model call: resumable once its budget is raised.
      const conversation = await server.request('POST', `/api/projects/${projectId}/conversations`, {
        token: frank.token,
        body: {},
      })
      const failed = await server.request('POST', `/api/conversations/${conversation.body.id}/runs`, {
        token: frank.token,
        body: { input: 'go', model: 'quick', budget: { maxTokens: 1 } },
      })
      await waitForRun(server, frank.token, failed.body.id as string, ['failed'])
      // The project's cap of 2 is taken by two running runs.
      const busy = [await start(frank, projectId, 'slow'), await start(frank, projectId, 'slow')]
      expect(busy.map((run) => run.status)).toEqual([201, 201])
      const resume = () =>
        server.request('POST', `/api/runs/${failed.body.id}/resume`, {
          token: frank.token,
          body: { budget: { maxTokens: 100_000 } },
        })
      const refused = await resume()
      expect(refused.status).toBe(429)
      expect(refused.body).toMatchObject({
        code: 'too_many_runs',
        quota: { scope: 'project', limit: 'maxActiveRuns', value: 2 },
      })
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0)
      await cancel(frank, busy[0]!.body.id as string)
      const resumed = await resume()
      expect(resumed.status).toBe(200)
      await waitForRun(server, frank.token, failed.body.id as string, ['completed'])
      await cancel(frank, busy[1]!.body.id as string)
    })

    it('a burst of run requests sent at once passes a quota no further than its limit', async () => {
      const grace = await server.createUser()
      const conversationIn = async (projectId: string) =>
        (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: grace.token, body: {} }))
          .body.id as string
      const burst = (conversations: string[], model: 'slow' | 'quick') =>
        Promise.all(
          conversations.map((id) =>
            server.request('POST', `/api/conversations/${id}/runs`, {
              token: grace.token,
              body: { input: 'go', model },
            }),
          ),
        )
      // Runs queued or running in one project (the limit is 2), all asked for together.
      const projectId = await newProject(grace)
      const crowded = await Promise.all(Array.from({ length: 12 }, () => conversationIn(projectId)))
      const answers = await burst(crowded, 'slow')
      const accepted = answers.filter((answer) => answer.status === 201)
      expect(accepted).toHaveLength(2)
      expect(answers.filter((answer) => answer.status === 429).map((answer) => answer.body.quota)).toEqual(
        Array(10).fill({ scope: 'project', limit: 'maxActiveRuns', value: 2 }),
      )
      for (const answer of accepted) await cancel(grace, answer.body.id as string)

      // Runs started per minute by one user (the limit is 6, and 2 were started above), in four projects.
      const projects = await Promise.all(Array.from({ length: 4 }, () => newProject(grace)))
      const spread = await Promise.all(Array.from({ length: 8 }, (_, i) => conversationIn(projects[i % 4]!)))
      const quick = await burst(spread, 'quick')
      expect(quick.filter((answer) => answer.status === 201)).toHaveLength(4)
      expect(quick.filter((answer) => answer.status === 429).map((answer) => answer.body.quota)).toEqual(
        Array(4).fill({ scope: 'user', limit: 'runsPerMinute', value: 6 }),
      )
    })

    it('retries with one Idempotency-Key sent at once all get the run, also when it took the last slot', async () => {
      const judy = await server.createUser()
      const projectId = await newProject(judy)
      const busy = await start(judy, projectId, 'slow') // 1 of the project's 2
      const conversation = await server.request('POST', `/api/projects/${projectId}/conversations`, {
        token: judy.token,
        body: {},
      })
      const send = () =>
        server.request('POST', `/api/conversations/${conversation.body.id}/runs`, {
          token: judy.token,
          headers: { 'idempotency-key': 'judy-1' },
          body: { input: 'go', model: 'slow', ifActive: 'enqueue' },
        })
      const answers = await Promise.all([send(), send(), send()])
      expect(answers.map((answer) => answer.status)).toEqual([201, 201, 201])
      expect(new Set(answers.map((answer) => answer.body.id)).size).toBe(1)
      await cancel(judy, answers[0]!.body.id as string)
      await cancel(judy, busy.body.id as string)
    })

    it('resumes sent at once take no more slots than there are', async () => {
      const ivan = await server.createUser()
      const projectId = await newProject(ivan)
      // Four runs that failed on their budget, in four conversations: each resumable with a higher one.
      const failed: string[] = []
      for (let i = 0; i < 4; i++) {
        const conversation = await server.request('POST', `/api/projects/${projectId}/conversations`, {
          token: ivan.token,
          body: {},
        })
        const run = await server.request('POST', `/api/conversations/${conversation.body.id}/runs`, {
          token: ivan.token,
          body: { input: 'go', model: 'slow', budget: { maxTokens: 1 } },
        })
        failed.push(run.body.id as string)
      }
      for (const id of failed) await waitForRun(server, ivan.token, id, ['failed'])
      const answers = await Promise.all(
        failed.map((id) =>
          server.request('POST', `/api/runs/${id}/resume`, { token: ivan.token, body: { budget: { maxTokens: 1e6 } } }),
        ),
      )
      expect(answers.map((answer) => answer.status).sort()).toEqual([200, 200, 429, 429])
      for (const [i, answer] of answers.entries()) if (answer.status === 200) await cancel(ivan, failed[i]!)
    })
  })
}

for (const engine of apiEngines()) {
  describe(`run quotas in queue mode (${engine})`, () => {
    let store: Store
    let server: TestServer

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, {
        models: [
          new ScriptedModel({
            id: 'slow',
            turns: [{ text: 'x '.repeat(600), chunks: 600, delayMs: 100 }],
            whenExhausted: 'loop',
          }),
          new ScriptedModel({ id: 'quick', turns: [{ text: 'Done.' }], whenExhausted: 'loop' }),
        ],
        runQuota: { maxActiveRunsPerProject: 1, overLimit: 'queue', maxQueuedRunsPerUser: 3 },
      })
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

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

    it('a run over a quota waits as queued with its position, and starts in order as room frees', async () => {
      const alice = await server.createUser()
      const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'q' } }))
        .body.id as string
      const first = await start(alice, projectId, 'slow')
      expect(first.body).toMatchObject({ status: 'running', queue: null })
      const second = await start(alice, projectId, 'quick')
      const third = await start(alice, projectId, 'quick')
      expect([second.status, third.status]).toEqual([201, 201])
      expect(second.body).toMatchObject({ status: 'queued', queue: { reason: 'quota', position: 1 }, startedAt: null })
      expect(third.body).toMatchObject({ status: 'queued', queue: { reason: 'quota', position: 2 } })
      const read = await server.request('GET', `/api/runs/${third.body.id}`, { token: alice.token })
      expect(read.body.queue).toEqual({ reason: 'quota', position: 2 })

      // The user's queue is bounded: past it, 429 naming that quota.
      const fourth = await start(alice, projectId, 'quick')
      expect(fourth.body.queue).toEqual({ reason: 'quota', position: 3 })
      const refused = await start(alice, projectId, 'quick')
      expect(refused.status).toBe(429)
      expect(refused.body).toMatchObject({
        code: 'too_many_runs',
        quota: { scope: 'user', limit: 'maxQueuedRuns', value: 3 },
      })

      // The running one ends: the waiting ones start one at a time, oldest first, and complete.
      await server.request('POST', `/api/runs/${first.body.id}/cancel`, { token: alice.token })
      const runs = []
      for (const queued of [second, third, fourth])
        runs.push(await waitForRun(server, alice.token, queued.body.id as string, ['completed'], 30_000))
      const started = runs.map((run) => Date.parse(run.startedAt as string))
      const ended = runs.map((run) => Date.parse(run.endedAt as string))
      expect(started).toEqual([...started].sort((a, b) => a - b))
      // One at a time: each started once the one before it had ended.
      expect(started[1]!).toBeGreaterThanOrEqual(ended[0]!)
      expect(started[2]!).toBeGreaterThanOrEqual(ended[1]!)
      expect(runs.every((run) => run.queue === null)).toBe(true)
    })

    it('a burst sent at once: one run starts, as many wait as the queue holds, the rest are refused', async () => {
      const hana = await server.createUser()
      const projectId = (await server.request('POST', '/api/projects', { token: hana.token, body: { name: 'b' } })).body
        .id as string
      const conversations = await Promise.all(
        Array.from(
          { length: 7 },
          async () =>
            (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: hana.token, body: {} }))
              .body.id as string,
        ),
      )
      const answers = await Promise.all(
        conversations.map((id) =>
          server.request('POST', `/api/conversations/${id}/runs`, {
            token: hana.token,
            body: { input: 'go', model: 'slow' },
          }),
        ),
      )
      const statuses = answers.map((answer) => (answer.status === 201 ? answer.body.status : answer.status)).sort()
      expect(statuses).toEqual([429, 429, 429, 'queued', 'queued', 'queued', 'running'])
      for (const answer of answers.filter((one) => one.status === 201))
        await server.request('POST', `/api/runs/${answer.body.id}/cancel`, { token: hana.token })
    })

    it('a cancelled waiting run leaves the line; the others move up', async () => {
      const bob = await server.createUser()
      const projectId = (await server.request('POST', '/api/projects', { token: bob.token, body: { name: 'q' } })).body
        .id as string
      const running = await start(bob, projectId, 'slow')
      const a = await start(bob, projectId, 'quick')
      const b = await start(bob, projectId, 'quick')
      expect(b.body.queue).toEqual({ reason: 'quota', position: 2 })
      expect((await server.request('POST', `/api/runs/${a.body.id}/cancel`, { token: bob.token })).body).toMatchObject({
        status: 'cancelled',
      })
      expect((await server.request('GET', `/api/runs/${b.body.id}`, { token: bob.token })).body.queue).toEqual({
        reason: 'quota',
        position: 1,
      })
      await server.request('POST', `/api/runs/${running.body.id}/cancel`, { token: bob.token })
      await waitForRun(server, bob.token, b.body.id as string, ['completed'], 30_000)
    })
  })
}

const engines = testEngines()
if (!engines.includes('postgres'))
  console.warn('[plinth tests] skipping the two-instance queue test: it needs Postgres (TEST_DATABASE_URL)')

describe.skipIf(!engines.includes('postgres'))('queue mode across two instances on one Postgres', () => {
  let database: TestDatabase
  const stores: Store[] = []
  const servers: TestServer[] = []

  beforeAll(async () => {
    database = await createTestDatabase('postgres')
    for (let instance = 0; instance < 2; instance++) {
      const store = await database.open()
      stores.push(store)
      servers.push(
        await startTestServer(store, {
          models: [
            new ScriptedModel({
              id: 'slow',
              turns: [{ text: 'x '.repeat(600), chunks: 600, delayMs: 100 }],
              whenExhausted: 'loop',
            }),
            new ScriptedModel({
              id: 'steady',
              turns: [{ text: 'a b c d', chunks: 4, delayMs: 30 }],
              whenExhausted: 'loop',
            }),
          ],
          runQuota: { maxActiveRunsPerProject: 1, overLimit: 'queue' },
        }),
      )
    }
  })
  afterAll(async () => {
    for (const server of servers) await server.close()
    for (const store of stores) await store.close()
    await database?.drop()
  })

  it('runs queued through either instance start one at a time, oldest first, whichever instance promotes them', async () => {
    const [a, b] = servers as [TestServer, TestServer]
    const dana = await a.createUser()
    const projectId = (await a.request('POST', '/api/projects', { token: dana.token, body: { name: 'shared' } })).body
      .id as string
    const start = async (server: TestServer, model: string) => {
      const conversation = await server.request('POST', `/api/projects/${projectId}/conversations`, {
        token: dana.token,
        body: {},
      })
      return server.request('POST', `/api/conversations/${conversation.body.id}/runs`, {
        token: dana.token,
        body: { input: 'go', model },
      })
    }
    const blocker = await start(a, 'slow')
    expect(blocker.body.status).toBe('running')
    const queued = []
    for (let index = 0; index < 6; index++) queued.push(await start(index % 2 === 0 ? b : a, 'steady'))
    expect(queued.map((run) => run.body.queue)).toEqual(
      queued.map((_, index) => ({ reason: 'quota', position: index + 1 })),
    )
    await b.request('POST', `/api/runs/${blocker.body.id}/cancel`, { token: dana.token })
    const runs = []
    for (const run of queued) runs.push(await waitForRun(a, dana.token, run.body.id as string, ['completed'], 60_000))
    // Never two at once in the project, across both instances: each started after the one before ended.
    for (let index = 1; index < runs.length; index++)
      expect(Date.parse(runs[index]!.startedAt as string)).toBeGreaterThanOrEqual(
        Date.parse(runs[index - 1]!.endedAt as string),
      )
  })
})

describe.skipIf(!engines.includes('postgres'))('a resume racing a new message in its conversation', () => {
  let database: TestDatabase
  let store: Store
  let server: TestServer
  let holder: pg.Client

  beforeAll(async () => {
    database = await createTestDatabase('postgres')
    store = await database.open()
    server = await startTestServer(store, {
      models: [new ScriptedModel({ id: 'quick', turns: [{ text: 'Done.' }], whenExhausted: 'loop' })],
      runQuota: { maxActiveRunsPerProject: 5 },
    })
    holder = new pg.Client({ connectionString: database.url })
    await holder.connect()
  })
  afterAll(async () => {
    await holder?.end()
    await server?.close()
    await store?.close()
    await database?.drop()
  })

  const waiting = async (lock: string) =>
    Number(
      (await holder.query(`select count(*) as n from pg_locks where not granted and ${lock}`)).rows[0]?.n as string,
    )

  it('is refused or wins, never deadlocked: the resume takes the conversation before any shared lock', async () => {
    const erin = await server.createUser()
    const projectId = (await server.request('POST', '/api/projects', { token: erin.token, body: { name: 'r' } })).body
      .id as string
    const conversation = await server.request('POST', `/api/projects/${projectId}/conversations`, {
      token: erin.token,
      body: {},
    })
    const failed = await server.request('POST', `/api/conversations/${conversation.body.id}/runs`, {
      token: erin.token,
      body: { input: 'go', model: 'quick', budget: { maxTokens: 1 } },
    })
    await waitForRun(server, erin.token, failed.body.id as string, ['failed'])
    // The event log's lock held elsewhere (as a busy instance's append would): the resume waits for it.
    await holder.query('select pg_advisory_lock(748202)')
    const resumed = server.request('POST', `/api/runs/${failed.body.id}/resume`, {
      token: erin.token,
      body: { budget: { maxTokens: 100_000 } },
    })
    await waitFor(async () => (await waiting(`locktype = 'advisory'`)) > 0, { what: 'the resume to wait' })
    const created = server.request('POST', `/api/conversations/${conversation.body.id}/runs`, {
      token: erin.token,
      body: { input: 'and then', model: 'quick' },
    })
    await waitFor(async () => (await waiting('true')) > 1, { what: 'the new run to wait as well' })
    await holder.query('select pg_advisory_unlock(748202)')
    const [resume, create] = await Promise.all([resumed, created])
    expect([resume.status, create.status, create.body.code]).toEqual([200, 409, 'run_active'])
  })
})
