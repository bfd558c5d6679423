import { sql } from 'kysely'
import { appendEvents } from '../event-log.js'
import { kysely, type Executor } from '../executor.js'
import { runEvent, updateRun, type Run, type RunBudget } from '../run-repository.js'
import { runQuotaCheck, type RunQuotaLimits } from '../run-quota-repository.js'
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
  quota?: RunQuotaLimits,
): Promise<Run> {
  const run = await updateRun(tx, runId, {
    move: { from: ['failed'], to: 'running' },
    phase: 'thinking',
    error: null,
    lease,
    ...(budget !== undefined && { budget }),
  })
  // Counted again under the user's and project's locks, as a new run is (`createRun`'s `quota`), now
  // that it holds its conversation's active slot and before the event log's lock: a burst of resumes
  // passes no further than a limit. Over one it throws (`isRunQuotaFull`), and the transaction ends.
  if (quota) await sql`select ${runQuotaCheck(runId, run.ownerId, run.projectId, quota)}`.execute(kysely(tx))
  await appendEvents(tx, [runEvent(run, 'run.status', { runId, status: run.status, phase: run.phase })])
  return run
}
