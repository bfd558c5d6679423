import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { announceRunEnded, openStore, runEndedSignal, updateRun, type Store } from '../../src/store/index.js'
import { createTestDatabase, testEngines, type TestDatabase } from '../helpers/engines.js'
import { seedProject, startedRun, type SeedScope } from '../helpers/store-seed.js'
import { within } from '../helpers/waits.js'

// A handler run after a person approved it gets its run's cancel signal from the store, not from the
// run manager (docs/architecture.md#the-command-bus): it aborts when the run ends, wherever it was ended.
describe.each(testEngines())('the run-ended signal of an approved handler on %s', (engine) => {
  let database: TestDatabase
  let store: Store
  let scope: SeedScope

  beforeAll(async () => {
    database = await createTestDatabase(engine)
    store = await database.open()
    scope = await seedProject(store, 'approver')
  })
  afterAll(async () => {
    await store?.close()
    await database?.drop()
  })

  const newRun = () => startedRun(store, scope, 'driver.1')

  /** Ends the run as a cancel of a run nobody drives does: ended, and announced on commit. */
  const cancel = (db: Store, runId: string) =>
    db.transaction(async (tx) => {
      await updateRun(tx, runId, { move: { from: ['running'], to: 'cancelled' }, ended: true, lease: null })
      await announceRunEnded(tx, runId)
    })

  /** Resolves once this instance has heard `runId`'s announcement (subscribed before it is made). */
  const hearing = (runId: string) =>
    new Promise<void>((resolve) => {
      const stop = store.runs.subscribe((heard) => {
        if (heard !== runId) return
        stop()
        resolve()
      })
    })
  /** After an announcement was heard: a round trip, so the signal's own read of the run has been made. */
  const settle = () => store.transaction(async () => undefined)

  it('aborts once its run is ended and announced, and not for another run’s end', async () => {
    const run = await newRun()
    const other = await newRun()
    const ended = runEndedSignal(store, run.id)
    const aborted = new Promise<void>((resolve) => ended.signal.addEventListener('abort', () => resolve()))
    try {
      const otherHeard = hearing(other.id)
      await cancel(store, other.id)
      await within(otherHeard, 30_000, 'the other run’s announcement')
      await settle()
      expect(ended.signal.aborted).toBe(false)
      await cancel(store, run.id)
      await within(aborted, 30_000, 'the signal to abort after its run was cancelled')
      expect(ended.signal.reason).toBe('cancelled')
    } finally {
      ended.stop()
    }
  })

  it('an announcement for a run that has not ended leaves the signal alone; stop() stops listening', async () => {
    const run = await newRun()
    const ended = runEndedSignal(store, run.id)
    const heard = hearing(run.id)
    await announceRunEnded(store, run.id)
    await within(heard, 30_000, 'the announcement')
    await settle()
    expect(ended.signal.aborted).toBe(false)
    ended.stop()
    const heardAgain = hearing(run.id)
    await cancel(store, run.id)
    await within(heardAgain, 30_000, 'the cancel’s announcement')
    await settle()
    expect(ended.signal.aborted).toBe(false)
  })

  // Another instance is another store on the same database: only Postgres has more than one.
  if (engine === 'postgres')
    it('aborts when another instance ends the run', async () => {
      const run = await newRun()
      const ended = runEndedSignal(store, run.id)
      const aborted = new Promise<void>((resolve) => ended.signal.addEventListener('abort', () => resolve()))
      const elsewhere = await openStore({ databaseUrl: database.url!, poolSize: 1 })
      try {
        await cancel(elsewhere, run.id)
        await within(aborted, 30_000, 'the signal to abort after another instance cancelled the run')
      } finally {
        ended.stop()
        await elsewhere.close()
      }
    })
})
