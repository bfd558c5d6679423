import { appendEvents } from '../event-log.js'
import type { Executor } from '../executor.js'
import { runEvent, updateRun, type Run } from '../run-repository.js'
import type { Lease } from './lease.js'

/**
 * failed → running: `POST /api/runs/:id/resume`, in the caller's transaction after it locked the run
 * and checked that its failure is one a run resumes from. It continues from its last checkpoint.
 */
export async function resumeFailedRun(tx: Executor, runId: string, lease: Lease): Promise<Run> {
  const run = await updateRun(tx, runId, {
    move: { from: ['failed'], to: 'running' },
    phase: 'thinking',
    error: null,
    lease,
  })
  await appendEvents(tx, [runEvent(run, 'run.status', { runId, status: run.status, phase: run.phase })])
  return run
}
