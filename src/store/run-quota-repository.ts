import { sql, type RawBuilder } from 'kysely'
import { kysely, type Executor } from './executor.js'
import { storableJson } from './storable.js'

/** A project's own run quota, set by the operator (null: the server's defaults). */
export type ProjectQuota = {
  /** Runs queued or running in the project at once. */
  maxActiveRuns?: number
  /** Runs started in the project in any 60 seconds. */
  runsPerMinute?: number
}

/** A stored quota (null: none). */
export function projectQuota(stored: unknown): ProjectQuota | null {
  if (stored === null || typeof stored !== 'object') return null
  const value = stored as Record<string, unknown>
  const quota: ProjectQuota = {}
  for (const key of ['maxActiveRuns', 'runsPerMinute'] as const)
    if (typeof value[key] === 'number') quota[key] = value[key]
  return Object.keys(quota).length > 0 ? quota : null
}

/**
 * A project id in a read: a value, or SQL naming it in the statement that carries the read (the
 * conversation's `project_id` when it is read with the conversation).
 */
export type ProjectIdSql = string | RawBuilder<unknown>

/**
 * The limits a new run is counted against once more as it is written (`createRun`'s `quota`): absent,
 * not counted. `queueMode`: the runs waiting for a quota hold no slot, and a minute's runs are those
 * that started in it.
 */
export interface RunQuotaLimits {
  queueMode: boolean
  userActive?: number
  projectActive?: number
  userPerMinute?: number
  projectPerMinute?: number
  /** A run queued for a quota: the user's runs waiting so. */
  userQueued?: number
}

/** The re-count of a run's quotas under its user's and project's locks (`migrations/0042_run_quota_check.sql`), for the statement that writes it. */
export function runQuotaCheck(
  runId: string,
  ownerId: string,
  projectId: string,
  limits: RunQuotaLimits,
): RawBuilder<boolean> {
  const limit = (value: number | undefined) => sql`${value ?? null}::int`
  return sql<boolean>`plinth_check_run_quota(${runId}, ${ownerId}, ${projectId}, ${limits.queueMode}::boolean,
    ${limit(limits.userActive)}, ${limit(limits.projectActive)}, ${limit(limits.userPerMinute)}, ${limit(limits.projectPerMinute)},
    ${limit(limits.userQueued)})`
}

/** What the quotas compare, for a user and a project: runs active now, and runs started in the last minute. */
export interface RunCounts {
  userActive: number
  projectActive: number
  userLastMinute: number
  projectLastMinute: number
  /**
   * Milliseconds until the window holds fewer runs than its per-minute limit: until the limit-th newest
   * of the last minute's runs leaves it (0 when fewer are in it; the oldest's time without a limit).
   */
  userWindowFreesInMs: number
  projectWindowFreesInMs: number
  /** The user's runs waiting for a quota (queue mode). */
  userQueued: number
}

/**
 * The counts in one subquery (each an indexed lookup), timed by the database's clock so that every
 * instance counts the same window; run with the other checks before a new run (`readTogether`).
 */
export function runCountsRead(
  scope: { projectId: ProjectIdSql; userId: string },
  mode: 'refuse' | 'queue' = 'refuse',
  perMinute: { user?: number; project?: number } = {},
): RawBuilder<unknown> {
  const { projectId, userId } = scope
  // In queue mode the runs waiting for a quota hold no slot, and a minute's runs are those that started in it.
  const active =
    mode === 'queue'
      ? sql`(status = 'running' or (status = 'queued' and queued_for is null))`
      : sql`status in ('queued', 'running')`
  const at = mode === 'queue' ? sql.ref('started_at') : sql.ref('created_at')
  const lastMinute = sql`${at} > now() - interval '60 seconds'`
  // A retry succeeds once the limit-th newest run has left the window, not merely the oldest.
  const freesIn = (column: 'owner_id' | 'project_id', id: ProjectIdSql, limit: RawBuilder<unknown>) =>
    sql`coalesce((select extract(epoch from ${at} + interval '60 seconds' - now()) * 1000 from runs
      where ${sql.ref(column)} = ${id} and ${lastMinute} order by ${at} desc offset greatest(${limit} - 1, 0) limit 1), 0)`
  const userLimit = sql`${perMinute.user ?? 1}::int`
  // The project's own limit, set by the operator, before the server's.
  const projectLimit = sql`coalesce((select (quota->>'runsPerMinute')::int from projects where id = ${projectId}), ${perMinute.project ?? 1}::int)`
  return sql`select jsonb_build_object(
      'userActive', (select count(*) from runs where owner_id = ${userId} and ${active}),
      'projectActive', (select count(*) from runs where project_id = ${projectId} and ${active}),
      'userLastMinute', (select count(*) from runs where owner_id = ${userId} and ${lastMinute}),
      'projectLastMinute', (select count(*) from runs where project_id = ${projectId} and ${lastMinute}),
      'userWindowFreesInMs', ${freesIn('owner_id', userId, userLimit)},
      'projectWindowFreesInMs', ${freesIn('project_id', projectId, projectLimit)},
      'userQueued', ${mode === 'queue' ? sql`(select count(*) from runs where owner_id = ${userId} and status = 'queued' and queued_for = 'quota')` : sql`0`})`
}

/** A project's own quota, for `readTogether` (read it with `projectQuota`). */
export function projectQuotaRead(projectId: string): RawBuilder<unknown> {
  return sql`select quota from projects where id = ${projectId}`
}

/** The counts a `runCountsRead` found. */
export function runCounts(read: unknown): RunCounts {
  const value = (read && typeof read === 'object' ? read : {}) as Record<string, unknown>
  const count = (key: keyof RunCounts) => Math.max(0, Number(value[key] ?? 0))
  return {
    userActive: count('userActive'),
    projectActive: count('projectActive'),
    userLastMinute: count('userLastMinute'),
    projectLastMinute: count('projectLastMinute'),
    userWindowFreesInMs: count('userWindowFreesInMs'),
    projectWindowFreesInMs: count('projectWindowFreesInMs'),
    userQueued: count('userQueued'),
  }
}

/** Several reads in one statement (one round trip): each subquery's value under its name. */
export async function readTogether(
  db: Executor,
  reads: { [name: string]: RawBuilder<unknown> },
): Promise<{ [name: string]: unknown }> {
  const names = Object.keys(reads)
  const result = await sql<{ [name: string]: unknown }>`select ${sql.join(
    names.map((name) => sql`(${reads[name]!}) as ${sql.ref(name)}`),
  )}`.execute(kysely(db))
  return result.rows[0] ?? {}
}

/** Sets (null: removes) a live project's own quota; false when there is no such project. */
export async function setProjectQuota(db: Executor, projectId: string, quota: ProjectQuota | null): Promise<boolean> {
  const kept = projectQuota(quota)
  const result = await kysely(db)
    .updateTable('projects')
    .set({ quota: kept ? storableJson(kept) : null, updated_at: new Date() })
    .where('id', '=', projectId)
    .where('deleted_at', 'is', null)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}
