import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { appendEvents, lockRun, runEvent, updateRun, type Run, type Store } from '../../src/store/index.js'
import { sql, testDb } from '../../src/store/test-access.js'
import { openTestStore, testEngines } from '../helpers/engines.js'
import { seedProject, startedRun, type SeedScope } from '../helpers/store-seed.js'

// A driver's streamed events go only while it holds its run (docs/architecture.md#the-event-log): a delta
// must never land after the message.completed of a cancel made elsewhere, whatever the timing.
describe.each(testEngines())('the run fence of a driver’s events on %s', (engine) => {
  let store: Store
  let scope: SeedScope

  beforeAll(async () => {
    store = await openTestStore(engine)
    scope = await seedProject(store, 'fenced')
  })
  afterAll(async () => store?.close())

  const runningRun = (owner: string) => startedRun(store, scope, owner)

  const delta = (run: Run, text: string) => runEvent(run, 'message.delta', { messageId: 'm1', text })
  const typesOf = async (run: Run) =>
    (
      await testDb(store).selectFrom('events').select(['type']).where('run_id', '=', run.id).orderBy('id').execute()
    ).map((row) => row.type)

  it('appends under the lease, and nothing once the run ended or another driver holds it', async () => {
    const run = await runningRun('driver.1')
    expect(await store.appendEvents([delta(run, 'a')], { runId: run.id, owner: 'driver.1' })).toHaveLength(1)
    expect(await store.appendEvents([delta(run, 'b')], { runId: run.id, owner: 'someone-else.1' })).toEqual([])
    await store.transaction((tx) =>
      updateRun(tx, run.id, { move: { from: ['running'], to: 'cancelled' }, ended: true, lease: null }),
    )
    expect(await store.appendEvents([delta(run, 'c')], { runId: run.id, owner: 'driver.1' })).toEqual([])
    expect((await typesOf(run)).filter((type) => type === 'message.delta')).toHaveLength(1)
  })

  // Only Postgres has concurrent connections: PGlite runs one statement at a time, so nothing can wait there.
  if (engine === 'postgres')
    it('a delta waiting while a cancel elsewhere commits is dropped, not appended after its message.completed', async () => {
      const run = await runningRun('driver.2')
      let release!: () => void
      const held = new Promise<void>((resolve) => (release = resolve))
      let cancelLocked!: () => void
      const locked = new Promise<void>((resolve) => (cancelLocked = resolve))
      // The cancel, as RunWriter.end makes it: the run's row locked, ended, its events appended; held open.
      const cancel = store.transaction(async (tx) => {
        await lockRun(tx, run.id)
        await updateRun(tx, run.id, { move: { from: ['running'], to: 'cancelled' }, ended: true, lease: null })
        await appendEvents(tx, [runEvent(run, 'message.completed', { messageId: 'm1', content: '' })])
        cancelLocked()
        await held
      })
      await locked
      const late = store.appendEvents([delta(run, 'late')], { runId: run.id, owner: 'driver.2' })
      // Wait until the delta's statement is blocked by the cancel, then let the cancel commit.
      const deadline = Date.now() + 30_000
      for (;;) {
        const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
          where wait_event_type = 'Lock' and query like '%insert into events%' and datname = current_database()`.execute(
          testDb(store),
        )
        if (rows[0]!.n > 0) break
        if (Date.now() > deadline) throw new Error('the delta never waited for the cancel')
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      release()
      await cancel
      expect(await late).toEqual([])
      expect(await typesOf(run)).not.toContain('message.delta')
      expect((await typesOf(run)).at(-1)).toBe('message.completed')
    })
})
