import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import { nextOccurrence, timingErrors, type ScheduleTiming } from '../src/schedules/index.js'
import {
  createSchedule,
  getSchedule,
  newId,
  readAuditEntries,
  recordOccurrence,
  type Schedule,
  type Store,
} from '../src/store/index.js'
import { sql, testDb } from '../src/store/test-access.js'
import { apiEngines, createTestDatabase, openTestStore, testEngines, type TestDatabase } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitFor, waitForRun } from './helpers/waits.js'

// Scheduled runs (docs/guides/schedules.md): timing by cron (in a time zone), interval or one time;
// each occurrence claimed by exactly one instance; run-now; history; a schedule whose owner lost access
// stops, saying why.

const timing = (part: Partial<ScheduleTiming>): ScheduleTiming => ({
  cron: null,
  every: null,
  at: null,
  timezone: 'UTC',
  ...part,
})

describe('schedule timing', () => {
  it('reads cron in its time zone across daylight-saving changes', () => {
    const daily = timing({ cron: '30 2 * * *', timezone: 'America/New_York' })
    const after = (iso: string) => nextOccurrence(daily, new Date(iso), new Date(iso))?.toISOString()
    // 7 March 2026 02:30 EST.
    expect(after('2026-03-07T00:00:00Z')).toBe('2026-03-07T07:30:00.000Z')
    // 8 March: the clocks jump from 02:00 to 03:00, so 02:30 never happens; it fires once, at 03:00 EDT.
    expect(after('2026-03-07T08:00:00Z')).toBe('2026-03-08T07:00:00.000Z')
    // 9 March: 02:30 EDT.
    expect(after('2026-03-08T08:00:00Z')).toBe('2026-03-09T06:30:00.000Z')
    // 1 November: 01:30 happens twice; an hourly-at-:30 schedule fires each real hour once.
    const hourly = timing({ cron: '30 * * * *', timezone: 'America/New_York' })
    const runs: string[] = []
    let at = new Date('2026-11-01T04:00:00Z')
    for (let step = 0; step < 4; step++) {
      at = nextOccurrence(hourly, at, at)!
      runs.push(at.toISOString())
    }
    expect(runs).toEqual([
      '2026-11-01T04:30:00.000Z',
      '2026-11-01T05:30:00.000Z',
      '2026-11-01T06:30:00.000Z',
      '2026-11-01T07:30:00.000Z',
    ])
    // Six fields: seconds first.
    const everyTenSeconds = timing({ cron: '*/10 * * * * *' })
    expect(nextOccurrence(everyTenSeconds, new Date('2026-01-01T00:00:03Z'), new Date(0))?.toISOString()).toBe(
      '2026-01-01T00:00:10.000Z',
    )
  })

  it('counts intervals from their anchor, and a one-time schedule has one occurrence', () => {
    const anchor = new Date('2026-01-01T00:00:00Z')
    const fiveMinutes = timing({ every: '5m' })
    expect(nextOccurrence(fiveMinutes, anchor, anchor)?.toISOString()).toBe('2026-01-01T00:05:00.000Z')
    // Late by 12 minutes: the next is on the anchor's grid, not 5 minutes from now.
    expect(nextOccurrence(fiveMinutes, new Date('2026-01-01T00:12:00Z'), anchor)?.toISOString()).toBe(
      '2026-01-01T00:15:00.000Z',
    )
    const once = timing({ at: '2026-06-01T12:00:00Z' })
    expect(nextOccurrence(once, anchor, anchor)?.toISOString()).toBe('2026-06-01T12:00:00.000Z')
    expect(nextOccurrence(once, new Date('2026-06-01T12:00:00Z'), anchor)).toBeNull()
  })

  it('names what is wrong with a bad timing', () => {
    const problems = (part: Partial<ScheduleTiming>) => timingErrors(timing(part)).map((error) => error.path)
    expect(problems({ cron: '61 * * * *' })).toEqual(['body.cron'])
    expect(problems({ cron: '* * * *' })).toEqual(['body.cron'])
    expect(problems({ cron: '0 0 * * * * 2027' })).toEqual(['body.cron'])
    expect(problems({ cron: '0 9 * * 1-5', timezone: 'Mars/Olympus' })).toEqual(['body.timezone'])
    expect(problems({ every: '0s' })).toEqual(['body.every'])
    expect(problems({ every: '5 minutes' })).toEqual(['body.every'])
    expect(problems({ every: '5m', cron: '* * * * *' })).toEqual(['body'])
    expect(problems({})).toEqual(['body'])
    expect(problems({ cron: '0 9 * * 1-5', timezone: 'Europe/Berlin' })).toEqual([])
  })
})

// On the embedded database too, always: its one session once made creating a schedule wait for ever
// (a check read outside the transaction that held it).
for (const engine of new Set(['pglite' as const, ...apiEngines()])) {
  describe(`schedules over HTTP (${engine})`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let projectId: string
    const adminToken = 'admin-token-for-the-schedule-tests'

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, {
        adminToken,
        plugins: ['rdm'],
        models: [new ScriptedModel({ id: 'quick', turns: [{ text: 'Report written.' }], whenExhausted: 'loop' })],
        schedules: { tickMs: 200 },
      })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'sched' } })).body
        .id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const create = (body: Record<string, unknown>, token = alice.token, project = projectId) =>
      server.request('POST', `/api/projects/${project}/schedules`, { token, body })
    const firings = async (scheduleId: string) =>
      (await server.request('GET', `/api/schedules/${scheduleId}/firings?limit=200`, { token: alice.token })).body
        .items as Array<Record<string, unknown>>

    it('a project holds at most 1,000 schedules: the next is 409 too_many_schedules', async () => {
      const own = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'many' } })).body
        .id
      // 999 paused ones written directly (creating them one by one would only take longer).
      await testDb(store)
        .insertInto('schedules')
        .values(
          Array.from({ length: 999 }, (_, index) => ({
            id: newId(),
            project_id: own,
            owner_id: alice.user.id,
            name: `s${index}`,
            every: '1h',
            target: sql`${JSON.stringify({ kind: 'run', input: 'x' })}::jsonb`,
            enabled: false,
          })),
        )
        .execute()
      const body = { every: '1h', enabled: false, target: { kind: 'run', input: 'x' } }
      expect((await create(body, alice.token, own)).status).toBe(201)
      const refused = await create(body, alice.token, own)
      expect([refused.status, refused.body.code]).toEqual([409, 'too_many_schedules'])
    })

    it('fires every second, each occurrence a run of its own; paused, it has no next occurrence', async () => {
      const created = await create({ every: '1s', name: 'ticker', target: { kind: 'run', input: 'write the report' } })
      expect(created.status).toBe(201)
      expect(created.body).toMatchObject({
        every: '1s',
        cron: null,
        timezone: 'UTC',
        enabled: true,
        missed: 'skip',
        target: { kind: 'run', input: 'write the report' },
      })
      const scheduleId = created.body.id as string
      await waitFor(async () => (await firings(scheduleId)).filter((f) => f.status === 'started').length >= 3, {
        timeoutMs: 20_000,
        intervalMs: 200,
      })
      const paused = await server.request('PATCH', `/api/schedules/${scheduleId}`, {
        token: alice.token,
        body: { enabled: false },
      })
      expect(paused.body).toMatchObject({ enabled: false, nextFireAt: null })

      const history = await firings(scheduleId)
      const started = history.filter((firing) => firing.status === 'started')
      // One run per occurrence, each in its own conversation, occurrences a second apart.
      expect(new Set(started.map((firing) => firing.runId)).size).toBe(started.length)
      expect(new Set(started.map((firing) => firing.occurrence)).size).toBe(started.length)
      const run = await waitForRun(server, alice.token, started.at(-1)!.runId as string, ['completed'])
      expect(run.approvalPolicy).toBe('dontAsk')
      const schedule = (await server.request('GET', `/api/schedules/${scheduleId}`, { token: alice.token })).body
      expect(schedule.lastRunId).toEqual(expect.any(String))
      expect(schedule.lastFiredAt).toEqual(expect.any(String))

      // Each firing is in the audit chain with its run.
      const chain = await readAuditEntries(store, 0, 100_000)
      const fired = chain.filter(
        (entry) =>
          entry.step === 'schedule:fire' && (entry.envelope as { scheduleId?: string }).scheduleId === scheduleId,
      )
      expect(fired.map((entry) => (entry.envelope as { runId: string }).runId)).toEqual(
        expect.arrayContaining(started.map((firing) => firing.runId)),
      )
    })

    it('after two hours with no instance, what was missed is counted, not walked, and the schedule goes on from now', async () => {
      const target = { kind: 'run', input: 'tick' }
      const every = await create({ every: '1s', enabled: false, target })
      const cron = await create({ cron: '* * * * * *', enabled: false, target })
      const ids = [every.body.id as string, cron.body.id as string]
      // As if no instance had run since two hours ago.
      const twoHoursAgo = new Date(Date.now() - 2 * 3_600_000)
      await testDb(store)
        .updateTable('schedules')
        .set({ enabled: true, next_fire_at: twoHoursAgo })
        .where('id', 'in', ids)
        .execute()
      const [everyMissed, cronMissed] = await Promise.all(
        ids.map((id) =>
          waitFor(async () => (await firings(id)).find((firing) => firing.status === 'missed'), {
            timeoutMs: 20_000,
            intervalMs: 200,
          }),
        ),
      )
      for (const id of ids)
        await server.request('PATCH', `/api/schedules/${id}`, { token: alice.token, body: { enabled: false } })
      // The interval's count is exact (7,200 occurrences, the first recorded as missed, the rest counted);
      // the cron's is counted up to 1,000.
      expect(everyMissed!.occurrence).toBe(twoHoursAgo.toISOString())
      expect(everyMissed!.missedCount as number).toBeGreaterThanOrEqual(7_195)
      expect(everyMissed!.missedCount as number).toBeLessThanOrEqual(7_260)
      expect(cronMissed!.missedCount).toBe(1_000)
      // Neither fired what it missed: the firings after it are recent.
      for (const id of ids) {
        const later = (await firings(id)).filter((firing) => firing.status !== 'missed')
        for (const firing of later) expect(Date.parse(firing.occurrence as string)).toBeGreaterThan(Date.now() - 60_000)
      }
    })

    it('run-now fires a paused schedule into its conversation; resuming counts from now', async () => {
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      const created = await create({
        cron: '0 9 * * 1-5',
        timezone: 'Europe/Berlin',
        enabled: false,
        target: { kind: 'run', input: 'morning digest', conversation: conversationId, approvalPolicy: 'ask' },
      })
      expect(created.status).toBe(201)
      expect(created.body.nextFireAt).toBeNull()
      const now = await server.request('POST', `/api/schedules/${created.body.id}/run-now`, { token: alice.token })
      expect(now.status).toBe(201)
      expect(now.body).toMatchObject({ status: 'started', manual: true, conversationId })
      const run = await waitForRun(server, alice.token, now.body.runId as string, ['completed'])
      expect(run.conversationId).toBe(conversationId)

      const resumed = await server.request('PATCH', `/api/schedules/${created.body.id}`, {
        token: alice.token,
        body: { enabled: true },
      })
      const next = new Date(resumed.body.nextFireAt as string)
      expect(next.getTime()).toBeGreaterThan(Date.now())
      // 09:00 in Berlin is 07:00 or 08:00 UTC, on a weekday.
      expect([7, 8]).toContain(next.getUTCHours())
      expect([1, 2, 3, 4, 5]).toContain(next.getUTCDay())
      const listed = await server.request('GET', `/api/projects/${projectId}/schedules`, { token: alice.token })
      expect((listed.body.items as Array<{ id: string }>).map((item) => item.id)).toContain(created.body.id)
      expect((await server.request('DELETE', `/api/schedules/${created.body.id}`, { token: alice.token })).status).toBe(
        204,
      )
      expect((await server.request('GET', `/api/schedules/${created.body.id}`, { token: alice.token })).status).toBe(
        404,
      )
    })

    it('a firing whose model was removed from the configuration fails unknown_model, making no conversation', async () => {
      const created = await create({
        every: '1h',
        enabled: false,
        target: { kind: 'run', input: 'hi', model: 'quick' },
      })
      expect(created.status).toBe(201)
      // As after a restart without that model.
      await testDb(store)
        .updateTable('schedules')
        .set({ target: sql`jsonb_set(target, '{model}', '"gone"')` })
        .where('id', '=', created.body.id)
        .execute()
      const conversations = async () =>
        (await server.request('GET', `/api/projects/${projectId}/conversations?limit=200`, { token: alice.token })).body
          .items.length as number
      const before = await conversations()
      const fired = await server.request('POST', `/api/schedules/${created.body.id}/run-now`, { token: alice.token })
      expect(fired.body).toMatchObject({ status: 'failed', error: { code: 'unknown_model' } })
      expect(await conversations()).toBe(before)
    })

    it('a retried create and run-now with the same Idempotency-Key answer the first again', async () => {
      const body = { every: '1h', enabled: false, name: 'once only', target: { kind: 'run', input: 'digest' } }
      const send = (key: string, sent = body) =>
        server.request('POST', `/api/projects/${projectId}/schedules`, {
          token: alice.token,
          body: sent,
          headers: { 'idempotency-key': key },
        })
      const first = await send('sched-create-1')
      const again = await send('sched-create-1')
      expect([first.status, again.status, again.headers.get('idempotent-replayed')]).toEqual([201, 201, 'true'])
      expect(again.body.id).toBe(first.body.id)
      const other = await send('sched-create-1', { ...body, name: 'another' })
      expect([other.status, other.body.code]).toEqual([422, 'idempotency_key_reused'])
      const listed = await server.request('GET', `/api/projects/${projectId}/schedules?limit=200`, {
        token: alice.token,
      })
      expect((listed.body.items as Array<{ name: string }>).filter((item) => item.name === 'once only')).toHaveLength(1)

      const fire = () =>
        server.request('POST', `/api/schedules/${first.body.id}/run-now`, {
          token: alice.token,
          headers: { 'idempotency-key': 'sched-fire-1' },
        })
      const fired = await fire()
      const refired = await fire()
      expect([fired.status, refired.status, refired.headers.get('idempotent-replayed')]).toEqual([201, 201, 'true'])
      expect(refired.body).toMatchObject({ id: fired.body.id, runId: fired.body.runId, status: 'started' })
      expect(await firings(first.body.id as string)).toHaveLength(1)
      await waitForRun(server, alice.token, fired.body.runId as string, ['completed'])
    })

    it('a command target is dispatched from the schedule entrance, as the schedule for its owner', async () => {
      const created = await create({
        every: '1h',
        enabled: false,
        target: { kind: 'command', commandId: 'rdm.ping', params: { target: 'cron' } },
      })
      expect(created.status).toBe(201)
      const fired = await server.request('POST', `/api/schedules/${created.body.id}/run-now`, { token: alice.token })
      expect(fired.status).toBe(201)
      expect(fired.body).toMatchObject({ status: 'started', runId: null, dispatchId: expect.any(String) })
      const audit = await server.request('GET', `/api/audit?projectId=${projectId}&entrance=schedule`, {
        token: alice.token,
      })
      expect(audit.body.items[0]).toMatchObject({
        id: fired.body.dispatchId,
        commandId: 'rdm.ping',
        entrance: 'schedule',
        actor: { type: 'schedule', id: created.body.id, onBehalfOf: alice.user.id },
        status: 'succeeded',
      })
    })

    // Regression: the claim's ON CONFLICT named the partial index's predicate with a parameter, which
    // Postgres's generic plan (from a statement's 6th run on a connection) could not match: every claim
    // of more than 5 due schedules rolled back, and nothing fired again.
    it('claims many due schedules in one transaction, on one connection', async () => {
      const due = new Date(Date.now() - 1000)
      const schedules: Schedule[] = []
      for (let index = 0; index < 12; index++)
        schedules.push(
          await createSchedule(store, {
            projectId,
            ownerId: alice.user.id,
            every: '1h',
            target: { kind: 'run', input: 'x' },
            enabled: false,
            nextFireAt: null,
          }),
        )
      const recorded = await store.transaction(async (tx) => {
        const firings = []
        for (const schedule of schedules)
          firings.push(await recordOccurrence(tx, schedule, { at: due, status: 'missed', missedCount: 0 }, null))
        // The same occurrence again: nothing is written.
        firings.push(await recordOccurrence(tx, schedules[0]!, { at: due, status: 'missed', missedCount: 0 }, null))
        return firings
      })
      expect(recorded.slice(0, 12).every((firing) => firing?.status === 'missed')).toBe(true)
      expect(recorded[12]).toBeUndefined()
    })

    it('refuses bad schedules with the field named, and hides them from others', async () => {
      const target = { kind: 'run', input: 'x' }
      for (const [body, status, path] of [
        [{ cron: '61 * * * *', target }, 400, 'body.cron'],
        [{ cron: '0 9 * * *', timezone: 'Nowhere/City', target }, 400, 'body.timezone'],
        [{ cron: '0 9 * * *', every: '1h', target }, 400, 'body'],
        [{ every: 'often', target }, 400, 'body.every'],
        [{ at: 'tomorrow', target }, 400, undefined],
        [{ every: '1h', target: { kind: 'run', input: 'x', model: 'nope' } }, 422, undefined],
        [{ every: '1h', target: { kind: 'command', commandId: 'nope.nothing' } }, 400, 'body.target.commandId'],
        [{ every: '1h', target: { kind: 'mail', to: 'x' } }, 400, undefined],
        // Accepted, they would never fire: a time gone by, a date that does not exist.
        [{ at: '2020-01-01T00:00:00Z', target }, 400, 'body.at'],
        [{ cron: '0 0 31 2 *', target }, 400, 'body.cron'],
      ] as const) {
        const answer = await create(body as Record<string, unknown>)
        expect(answer.status, JSON.stringify(body)).toBe(status)
        if (path) expect(answer.body.errors?.[0]?.path, JSON.stringify(body)).toBe(path)
      }
      const created = await create({ every: '1h', target })
      const past = await server.request('PATCH', `/api/schedules/${created.body.id}`, {
        token: alice.token,
        body: { at: '2020-01-01T00:00:00Z' },
      })
      expect([past.status, past.body.errors?.[0]?.path]).toEqual([400, 'body.at'])
      // Paused, a one-time schedule in the past is only a record: that may be kept.
      expect((await create({ at: '2020-01-01T00:00:00Z', target, enabled: false })).status).toBe(201)
      // …but not a time the embedded database cannot keep as sent (year 0, or 0050 read back as 1950).
      for (const at of ['0000-01-01T00:00:00Z', '0050-06-15T12:00:00Z'])
        expect((await create({ at, target, enabled: false })).body, at).toMatchObject({
          status: 400,
          code: 'validation_failed',
        })
      const bob = await server.createUser()
      expect((await server.request('GET', `/api/schedules/${created.body.id}`, { token: bob.token })).status).toBe(404)
      expect((await create({ every: '1h', target }, bob.token)).status).toBe(404)
      const othersConversation = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
      const bobProject = (await server.request('POST', '/api/projects', { token: bob.token, body: { name: 'b' } })).body
        .id
      const foreign = await create(
        { every: '1h', target: { kind: 'run', input: 'x', conversation: othersConversation } },
        bob.token,
        bobProject,
      )
      expect(foreign.status).toBe(404)
    })

    it('stops a schedule whose owner was disabled, saying why', async () => {
      const carol = await server.createUser()
      const project = (await server.request('POST', '/api/projects', { token: carol.token, body: { name: 'c' } })).body
        .id as string
      const created = await create({ every: '1s', target: { kind: 'run', input: 'x' } }, carol.token, project)
      expect(created.status).toBe(201)
      await server.request('PATCH', `/api/admin/users/${carol.user.id}`, {
        token: adminToken,
        body: { disabled: true },
      })
      await waitFor(async () => (await getSchedule(store, created.body.id as string))?.enabled === false, {
        timeoutMs: 20_000,
        intervalMs: 200,
      })
      const stopped = await getSchedule(store, created.body.id as string)
      expect(stopped).toMatchObject({ enabled: false, nextFireAt: null, stoppedReason: 'its owner is disabled' })
    })
  })
}

const engines = testEngines()
if (!engines.includes('postgres'))
  console.warn('[plinth tests] skipping the two-instance schedule test: it needs Postgres (TEST_DATABASE_URL)')

describe.skipIf(!engines.includes('postgres'))('a schedule on two instances sharing Postgres', () => {
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
          models: [new ScriptedModel({ id: 'quick', turns: [{ text: 'Done.' }], whenExhausted: 'loop' })],
          schedules: { tickMs: 100, pendingLeaseMs: 2_000 },
        }),
      )
    }
  })
  afterAll(async () => {
    for (const server of servers) await server.close().catch(() => undefined)
    for (const store of stores) await store.close()
    await database?.drop()
  })

  it('fires each occurrence exactly once, and the other instance goes on when one stops', async () => {
    const [a, b] = servers as [TestServer, TestServer]
    const dana = await a.createUser()
    const projectId = (await a.request('POST', '/api/projects', { token: dana.token, body: { name: 'two' } })).body
      .id as string
    const created = await a.request('POST', `/api/projects/${projectId}/schedules`, {
      token: dana.token,
      body: { every: '1s', target: { kind: 'run', input: 'tick' } },
    })
    const scheduleId = created.body.id as string
    const history = async (server: TestServer) =>
      (await server.request('GET', `/api/schedules/${scheduleId}/firings?limit=200`, { token: dana.token })).body
        .items as Array<{ occurrence: string; status: string; runId: string | null }>
    await waitFor(async () => (await history(b)).filter((f) => f.status === 'started').length >= 6, {
      timeoutMs: 30_000,
      intervalMs: 200,
    })

    // a stops; b goes on firing.
    await a.close()
    const before = (await history(b)).length
    await waitFor(async () => (await history(b)).filter((f) => f.status === 'started').length >= before + 3, {
      timeoutMs: 30_000,
      intervalMs: 200,
    })
    await b.request('PATCH', `/api/schedules/${scheduleId}`, { token: dana.token, body: { enabled: false } })

    const firings = await history(b)
    const occurrences = firings.map((firing) => Date.parse(firing.occurrence)).sort((x, y) => x - y)
    // Exactly one firing per occurrence, a second apart, none missed; one run each.
    expect(new Set(occurrences).size).toBe(occurrences.length)
    for (let index = 1; index < occurrences.length; index++)
      expect(occurrences[index]! - occurrences[index - 1]!).toBe(1000)
    const started = firings.filter((firing) => firing.status === 'started')
    expect(new Set(started.map((firing) => firing.runId)).size).toBe(started.length)
    expect(firings.every((firing) => firing.status === 'started' || firing.status === 'pending')).toBe(true)
    const runs = await b.request('GET', `/api/projects/${projectId}/conversations?limit=200`, { token: dana.token })
    expect(runs.body.items.length).toBe(firings.length)
  })
})
