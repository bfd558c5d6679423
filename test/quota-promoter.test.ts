import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { QuotaPromoter } from '../src/runmgr/quota-promoter.js'
import { RunQuotas } from '../src/runmgr/run-quotas.js'
import { LeaseClock } from '../src/runmgr/leases.js'
import type { DriverPool } from '../src/runmgr/driver-pool.js'
import { getRun, type Run, type Store } from '../src/store/index.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { newRunInput, seedProject, type SeedScope } from './helpers/store-seed.js'

// Queue mode starts waiting runs oldest first (docs/guides/operating.md#run-quotas).
for (const engine of testEngines()) {
  describe(`quota promoter on ${engine}`, () => {
    let store: Store
    let scope: SeedScope

    beforeAll(async () => {
      store = await openTestStore(engine)
      scope = await seedProject(store, 'promoter')
    })
    afterAll(async () => store?.close())

    /** A run waiting for a quota, alone in a new conversation. */
    async function waitingRun(): Promise<Run> {
      const created = await store.createRun(await newRunInput(store, scope), {
        lease: { owner: 'unused', expiresAt: new Date(Date.now() + 60_000) },
        allowQueue: true,
        queueForQuota: true,
      })
      if (!('run' in created) || created.run.queuedFor !== 'quota')
        throw new Error('the run is not waiting for a quota')
      return created.run
    }

    it('a newer waiting run never starts ahead of an older one found full in the same pass', async () => {
      const older = await waitingRun()
      const newer = await waitingRun()
      const quotas = new RunQuotas(100, { maxActiveRunsPerProject: 1, overLimit: 'queue' })
      // The project is full when the older run's counts are read (a run still running then), and has
      // room when the newer one's are read a moment later (that run has just ended).
      const counts = quotas.full.bind(quotas)
      let reads = 0
      quotas.full = (read, own) =>
        reads++ === 0
          ? { quota: { scope: 'project', limit: 'maxActiveRuns', value: 1 }, message: 'full', retryAfter: 5 }
          : counts(read, own)
      const spawned: string[] = []
      const promoter = new QuotaPromoter({
        store,
        log: { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined },
        quotas,
        pool: { spawn: (runId: string) => void spawned.push(runId) } as unknown as DriverPool,
        leases: new LeaseClock(60_000),
      })
      await promoter.poke()
      expect(reads).toBe(1)
      expect(spawned).toEqual([])
      expect((await getRun(store, newer.id))?.status).toBe('queued')
      // The next pass starts the older one, and only it.
      await promoter.poke()
      expect(spawned).toEqual([older.id])
      expect((await getRun(store, older.id))?.status).toBe('running')
      expect((await getRun(store, newer.id))?.status).toBe('queued')
    })
  })
}
