import { appendEvents } from '../event-log.js'
import type { Executor } from '../executor.js'
import { runEvent, updateRun, type Run, type RunBudget } from '../run-repository.js'
import type { Lease } from './lease.js'

/**
 * failed → running: `POST /api/runs/:id/resume`, in the caller's transaction after it locked the run
 * and checked that its failure is one a run resumes from. It continues from its last checkpoint, with
 * `budget` when the resume raised it.
 */
export async function resumeFailedRun(
  tx: Executor,
  runId: string,
  lease: Lease,
  budget?: RunBudget | null,
): Promise<Run> {
  const run = await updateRun(tx, runId, {
    move: { from: ['failed'], to: 'running' },
    phase: 'thinking',
    error: null,
    lease,
    ...(budget !== undefined && { budget }),
  })
  await appendEvents(tx, [runEvent(run, 'run.status', { runId, status: run.status, phase: run.phase })])
  return run
}
