import { sql } from 'kysely'
import type { JsonValue } from '../database.js'
import { appendEvents } from '../event-log.js'
import { moveInputAfterEarlierRuns } from '../message-repository.js'
import { kysely, type Executor } from '../executor.js'
import { projectQuota, runCounts, runCountsRead, type ProjectQuota, type RunCounts } from '../run-quota-repository.js'
import { lockRun, runEvent, runFromJson, updateRun, type Run } from '../run-repository.js'
import type { Lease } from './lease.js'

/** A run waiting for a quota that could start now as far as its conversation goes. */
export interface QuotaCandidate {
  run: Run
  /** Its project's own quota (null: the server's). */
  quota: ProjectQuota | null
}

/**
 * Takes the promoters' lock for this transaction (one instance promotes at a time, so two cannot both
 * fill the last slot); false when another instance holds it.
 */
export async function lockQuotaPromotion(tx: Executor): Promise<boolean> {
  const { rows } = await sql<{ ok: boolean }>`select pg_try_advisory_xact_lock(7261524301) as ok`.execute(kysely(tx))
  return rows[0]?.ok === true
}

/**
 * Runs waiting for a quota, oldest first, that are the first queued run of a conversation with no run
 * running or waiting for people (so starting one keeps the conversation's order and its one active run).
 */
export async function quotaCandidates(db: Executor, limit: number): Promise<QuotaCandidate[]> {
  const { rows } = await sql<{ run: { [key: string]: JsonValue }; quota: unknown }>`
    select to_jsonb(r.*) as run, p.quota from runs r join projects p on p.id = r.project_id
    where r.status = 'queued' and r.queued_for = 'quota'
      and not exists (select 1 from runs o where o.conversation_id = r.conversation_id
                        and (o.status in ('running', 'requires_action') or (o.status = 'queued' and o.id < r.id)))
    order by r.id limit ${limit}`.execute(kysely(db))
  return rows.map((row) => ({ run: runFromJson(row.run), quota: projectQuota(row.quota) }))
}

/** The queue-mode counts for a run's user and project. */
export async function quotaCountsFor(db: Executor, run: Pick<Run, 'ownerId' | 'projectId'>): Promise<RunCounts> {
  const { rows } = await sql<{ counts: unknown }>`select (${runCountsRead(
    { userId: run.ownerId, projectId: run.projectId },
    'queue',
  )}) as counts`.execute(kysely(db))
  return runCounts(rows[0]?.counts)
}

/** queued (for a quota) → running, in the promoter's transaction; undefined when it is no longer waiting. */
export async function startQuotaQueuedRun(tx: Executor, runId: string, lease: Lease): Promise<Run | undefined> {
  const locked = await lockRun(tx, runId)
  if (!locked || locked.status !== 'queued' || locked.queuedFor !== 'quota') return undefined
  const run = await updateRun(tx, runId, {
    move: { from: ['queued'], to: 'running' },
    phase: 'thinking',
    started: true,
    lease,
  })
  await moveInputAfterEarlierRuns(tx, runId)
  await appendEvents(tx, [runEvent(run, 'run.status', { runId, status: run.status, phase: run.phase })])
  return run
}

/** A run's place among the runs waiting for the same user's or project's quota (1: next). */
export async function quotaQueuePosition(
  db: Executor,
  run: Pick<Run, 'id' | 'ownerId' | 'projectId'>,
): Promise<number> {
  const { rows } = await sql<{ ahead: string | number }>`
    select count(*) as ahead from runs
    where status = 'queued' and queued_for = 'quota' and id < ${run.id}
      and (owner_id = ${run.ownerId} or project_id = ${run.projectId})`.execute(kysely(db))
  return Number(rows[0]?.ahead ?? 0) + 1
}
