import { appendEvents } from '../event-log.js'
import type { Store } from '../open-store.js'
import { runEvent, takeOverRun, updateRun, type Run } from '../run-repository.js'
import { closeStreamingMessages } from '../transcript-repository.js'
import type { Lease } from './lease.js'

/**
 * running → running under a new lease: a sweeper takes over a run whose lease passed `before` (its
 * driver stopped), re-checked under the row lock. A turn cut off mid-stream is closed and its round
 * asked again (the iteration is not used up). Undefined when the run is no longer there to take.
 */
export async function takeOver(store: Store, runId: string, lease: Lease, before: Date): Promise<Run | undefined> {
  return store.transaction(async (tx) => {
    const run = await takeOverRun(tx, runId, lease, before)
    if (!run) return undefined
    const cut = await closeStreamingMessages(tx, run, 'interrupted')
    const updated = cut > 0 ? await updateRun(tx, runId, { iteration: Math.max(0, run.iteration - 1) }) : run
    await appendEvents(tx, [
      runEvent(updated, 'run.status', { runId, status: updated.status, phase: updated.phase, resumed: true }),
    ])
    return updated
  })
}
