import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { http, lastLine, runPlinth, startServe, type ServeProcess } from './helpers/cli-process.js'
import { createTestDatabase, testEngines, type TestDatabase } from './helpers/engines.js'
import { ledgerViolations } from './helpers/ledger.js'
import { waitFor, waitForRoundStreaming, waitForRun } from './helpers/waits.js'
import { testDb } from '../src/store/test-access.js'

// Two server processes on one Postgres (docs/architecture.md#cooperating-instances). Cancel from the
// instance that does not drive a run reaches the one that does at once; a run whose driver was killed is
// taken over and resumed by the other once its lease has passed, without running its completed tool call
// again.
const engines = testEngines()
if (!engines.includes('postgres'))
  console.warn('[plinth tests] skipping the two-instance run tests: they need Postgres (TEST_DATABASE_URL)')

describe.skipIf(!engines.includes('postgres'))('two instances on one Postgres', () => {
  let cwd: string
  let database: TestDatabase
  let store: Store
  let token: string
  const servers: ServeProcess[] = []
  let a: ServeProcess
  let b: ServeProcess
  const adminToken = 'admin-token-for-the-two-instance-test'

  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-two-'))
    database = await createTestDatabase('postgres')
    store = await database.open()
    const slowText = Array.from({ length: 150 }, (_, index) => `word${index} `).join('')
    await writeFile(
      join(cwd, 'ping-then-slow.json'),
      JSON.stringify({
        turnBy: 'round',
        turns: [
          { text: 'Pinging first.', toolCalls: [{ name: 'rdm__ping', arguments: { target: 'x' } }] },
          { text: slowText, chunks: 150, delayMs: 40 },
        ],
      }),
    )
    await writeFile(
      join(cwd, 'plinth.config.json'),
      JSON.stringify({
        plugins: ['rdm'],
        models: [{ id: 'slow', provider: 'scripted', script: 'ping-then-slow.json' }],
        defaultModel: 'slow',
      }),
    )
    const env = { DATABASE_URL: database.url!, PLINTH_RUN_LEASE: '2s', PLINTH_ADMIN_TOKEN: adminToken }
    token = lastLine((await runPlinth(['users', 'create', 'two'], { cwd, env })).stdout)
    a = await startServe({ cwd, env })
    b = await startServe({ cwd, env })
    servers.push(a, b)
  }, 120_000)
  afterAll(async () => {
    for (const server of servers) await server.kill()
    await store?.close()
    await database?.drop()
    if (cwd) await rm(cwd, { recursive: true, force: true })
  })

  const startRun = async (on: ServeProcess): Promise<{ runId: string; conversationId: string }> => {
    const project = await http(on.url, 'POST', '/api/projects', { token, body: { name: `p${Date.now()}` } })
    const conversation = await http(on.url, 'POST', `/api/projects/${project.body.id}/conversations`, {
      token,
      body: {},
    })
    const run = await http(on.url, 'POST', `/api/conversations/${conversation.body.id}/runs`, {
      token,
      body: { input: 'go' },
    })
    expect(run.status).toBe(201)
    return { runId: run.body.id, conversationId: conversation.body.id }
  }
  const waitForStreaming = (runId: string): Promise<void> => waitForRoundStreaming(store, runId, 2)

  it('a token revoked on one instance stops working on the other at the next request (token lookups are cached)', async () => {
    const issued = await fetch(`${a.url}/api/admin/users`, {
      method: 'POST',
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'short-lived' }),
    }).then((response) => response.json() as Promise<{ token: { id: string; token: string } }>)
    const me = () => http(b.url, 'GET', '/api/me', { token: issued.token.token })
    // B has looked the token up (and cached it).
    expect((await me()).status).toBe(200)
    expect((await me()).status).toBe(200)
    const revoked = await fetch(`${a.url}/api/admin/tokens/${issued.token.id}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${adminToken}` },
    })
    expect(revoked.status).toBe(204)
    expect((await me()).status).toBe(401)
  })

  it("project listings are cached, and a project created, renamed or deleted on one instance shows in the other's next listings", async () => {
    const names = async (on: ServeProcess) =>
      (await http(on.url, 'GET', '/api/projects?limit=100', { token })).body.items as Array<{
        id: string
        name: string
      }>
    // Until the other instance's notification arrives (milliseconds; the cache alone would keep it 2 s).
    // The deadline stays under the cache's 2 s: only the notification can meet it.
    const eventually = (check: () => Promise<boolean>) =>
      waitFor(check, { timeoutMs: 1_500, what: 'the other instance to drop its cached listing' })
    await names(b)
    const created = await http(a.url, 'POST', '/api/projects', { token, body: { name: 'listed-1' } })
    // On the instance that wrote: at once.
    expect((await names(a)).some((project) => project.id === created.body.id)).toBe(true)
    await eventually(async () => (await names(b)).some((project) => project.id === created.body.id))
    expect(
      (await http(a.url, 'PATCH', `/api/projects/${created.body.id}`, { token, body: { name: 'listed-2' } })).status,
    ).toBe(200)
    expect((await names(a)).find((project) => project.id === created.body.id)?.name).toBe('listed-2')
    await eventually(
      async () => (await names(b)).find((project) => project.id === created.body.id)?.name === 'listed-2',
    )
    expect((await http(b.url, 'DELETE', `/api/projects/${created.body.id}`, { token })).status).toBe(204)
    expect((await names(b)).some((project) => project.id === created.body.id)).toBe(false)
    await eventually(async () => !(await names(a)).some((project) => project.id === created.body.id))
  })

  it(
    'a cancel on the other instance stops the driver at once: no more deltas, the call answered once',
    { timeout: 60_000 },
    async () => {
      const { runId } = await startRun(a)
      await waitForStreaming(runId)
      const cancelled = await http(b.url, 'POST', `/api/runs/${runId}/cancel`, { token })
      expect(cancelled.status).toBe(200)
      expect(cancelled.body).toMatchObject({ status: 'cancelled' })
      // The driver (A) heard of it within moments: once it says it stopped, it writes nothing more.
      await waitFor(() => /stopped driving a run that was ended or taken over elsewhere/.test(a.stdout()), {
        what: 'A to stop driving the run',
      })
      const events = await testDb(store)
        .selectFrom('events')
        .select(['id', 'type'])
        .where('run_id', '=', runId)
        .orderBy('id')
        .execute()
      const end = events.findIndex((event) => event.type === 'run.cancelled')
      expect(end).toBeGreaterThan(0)
      // At most a delta already in flight as the cancel committed; nothing else after the end.
      const after = events.slice(end + 1)
      expect(after.filter((event) => event.type !== 'message.delta')).toEqual([])
      expect(after.length).toBeLessThanOrEqual(1)
      expect(events.filter((event) => event.type === 'run.cancelled')).toHaveLength(1)
      const run = await testDb(store)
        .selectFrom('runs')
        .select(['status', 'lease_owner'])
        .where('id', '=', runId)
        .executeTakeFirstOrThrow()
      expect(run).toEqual({ status: 'cancelled', lease_owner: null })
      // A logged that it stopped driving a run ended elsewhere.
      expect(a.stdout()).toMatch(/stopped driving a run that was ended or taken over elsewhere/)
      expect(await ledgerViolations(store)).toEqual([])
    },
  )

  it(
    'a schedule fires each occurrence once across instances, and goes on when one of them is killed (kill -9)',
    { timeout: 240_000 },
    async () => {
      const env = { DATABASE_URL: database.url!, PLINTH_RUN_LEASE: '2s', PLINTH_ADMIN_TOKEN: adminToken }
      const owner = lastLine((await runPlinth(['users', 'create', 'scheduler'], { cwd, env })).stdout)
      const c = await startServe({ cwd, env })
      servers.push(c)
      const project = await http(a.url, 'POST', '/api/projects', { token: owner, body: { name: 'scheduled' } })
      const created = await http(c.url, 'POST', `/api/projects/${project.body.id}/schedules`, {
        token: owner,
        body: { every: '1s', target: { kind: 'run', input: 'tick' } },
      })
      expect(created.status).toBe(201)
      const scheduleId = created.body.id as string
      const firings = async () =>
        (await http(b.url, 'GET', `/api/schedules/${scheduleId}/firings?limit=200`, { token: owner })).body
          .items as Array<{ occurrence: string; status: string; runId: string | null }>
      await waitFor(async () => (await firings()).length >= 4, { timeoutMs: 30_000, intervalMs: 200 })
      c.child.kill('SIGKILL')
      await new Promise((resolve) => c.child.once('exit', resolve))
      const atKill = (await firings()).length
      // The others fire the next occurrences.
      await waitFor(async () => (await firings()).length >= atKill + 3, { timeoutMs: 30_000, intervalMs: 200 })
      await http(a.url, 'PATCH', `/api/schedules/${scheduleId}`, { token: owner, body: { enabled: false } })

      const all = await firings()
      const occurrences = all.map((firing) => Date.parse(firing.occurrence)).sort((x, y) => x - y)
      // One firing per occurrence, a second apart: none fired twice, none skipped across the kill.
      expect(new Set(occurrences).size).toBe(occurrences.length)
      for (let index = 1; index < occurrences.length; index++)
        expect(occurrences[index]! - occurrences[index - 1]!).toBe(1000)
      const started = all.filter((firing) => firing.status === 'started')
      expect(new Set(started.map((firing) => firing.runId)).size).toBe(started.length)
      // A firing the killed instance had claimed but not started stays pending until its claim is stale;
      // the rest started their runs (or were refused by the run quota, recorded as failed).
      expect(all.every((firing) => ['started', 'pending', 'failed'].includes(firing.status))).toBe(true)
      expect(started.length).toBeGreaterThanOrEqual(all.length - 2)
      // Once their claim is stale (30 s), the others fire those too: every occurrence ends up fired.
      await waitFor(async () => (await firings()).every((firing) => firing.status !== 'pending'), {
        timeoutMs: 90_000,
        intervalMs: 500,
      })
      const settled = await firings()
      expect(settled).toHaveLength(all.length)
      expect(settled.every((firing) => ['started', 'failed'].includes(firing.status))).toBe(true)
      // The killed instance's runs are resumed by the others; all end before the next test.
      for (const firing of settled.filter((each) => each.status === 'started'))
        await waitForRun(b.url, owner, firing.runId!, ['completed', 'failed', 'cancelled', 'expired'], 60_000)
    },
  )

  it(
    'a run whose driver is killed (kill -9) is resumed by the other instance once the lease has passed',
    { timeout: 90_000 },
    async () => {
      const { runId } = await startRun(a)
      await waitForStreaming(runId)
      a.child.kill('SIGKILL')
      await new Promise((resolve) => a.child.once('exit', resolve))
      // B takes the run over once A's lease has passed; it settles there.
      const run = await waitForRun(
        b.url,
        token,
        runId,
        ['completed', 'failed', 'cancelled', 'expired', 'requires_action'],
        60_000,
      )
      expect(run).toMatchObject({ status: 'completed', iteration: 2 })
      expect(b.stdout()).toMatch(/"msg":"recovered \d+ runs"/)
      const row = await testDb(store)
        .selectFrom('runs')
        .select('resumes')
        .where('id', '=', runId)
        .executeTakeFirstOrThrow()
      expect(row.resumes).toBe(1)
      // The ping completed before the kill: it ran once.
      const pings = await testDb(store).selectFrom('dispatches').select('status').where('run_id', '=', runId).execute()
      expect(pings).toEqual([{ status: 'succeeded' }])
      expect(await ledgerViolations(store)).toEqual([])
    },
  )
})
