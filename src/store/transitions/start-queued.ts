import type { Store } from '../open-store.js'
import { appendEvents } from '../event-log.js'
import { moveInputAfterEarlierRuns } from '../message-repository.js'
import { isUniqueViolation } from '../store-errors.js'
import { lockRun, runEvent, updateRun, type Run } from '../run-repository.js'
import type { Lease } from './lease.js'

/**
 * queued → running: the conversation's queue moves on. Undefined when the run is no longer queued,
 * or another run became active first (the one-active-run index refused; that run starts this one
 * when it ends).
 */
export async function startQueuedRun(store: Store, runId: string, lease: Lease): Promise<Run | undefined> {
  try {
    return await store.transaction(async (tx) => {
      const locked = await lockRun(tx, runId)
      if (!locked || locked.status !== 'queued') return undefined
      const run = await updateRun(tx, runId, {
        move: { from: ['queued'], to: 'running' },
        phase: 'thinking',
        started: true,
        lease,
      })
      await moveInputAfterEarlierRuns(tx, runId)
      await appendEvents(tx, [runEvent(run, 'run.status', { runId, status: run.status, phase: run.phase })])
      return run
    })
  } catch (error) {
    if (!isUniqueViolation(error)) throw error
    return undefined
  }
}
