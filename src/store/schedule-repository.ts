import { sql, type Selectable } from 'kysely'
import type { Schedules, ScheduleFirings } from './db-types.generated.js'
import { appendEvents } from './event-log.js'
import { kysely, type Executor } from './executor.js'
import { newId } from './ids.js'
import type { JsonValue } from './database.js'
import { toPage, type Page, type PageRequest } from './page.js'
import { storableJson } from './storable.js'

/** What a firing starts: a run in a new conversation or a given one. */
export interface ScheduleRunTarget {
  kind: 'run'
  input: string
  model?: string
  /** `new` (default): a conversation per firing; else the id of one to post into (queued behind its run). */
  conversation?: string
  approvalPolicy?: 'ask' | 'dontAsk'
}

/** What a firing dispatches: a command, as the schedule's creator, from the `schedule` entrance. */
export interface ScheduleCommandTarget {
  kind: 'command'
  commandId: string
  params?: Record<string, unknown>
}

export type ScheduleTarget = ScheduleRunTarget | ScheduleCommandTarget

export interface Schedule {
  id: string
  projectId: string
  ownerId: string
  name: string
  cron: string | null
  every: string | null
  at: string | null
  timezone: string
  target: ScheduleTarget
  enabled: boolean
  missed: 'skip' | 'fireOnce'
  nextFireAt: string | null
  lastFiredAt: string | null
  lastRunId: string | null
  stoppedReason: string | null
  createdAt: string
  updatedAt: string
}

export interface ScheduleInput {
  name?: string
  cron?: string | null
  every?: string | null
  at?: string | null
  timezone?: string
  target?: ScheduleTarget
  enabled?: boolean
  missed?: 'skip' | 'fireOnce'
}

export type FiringStatus = 'pending' | 'started' | 'failed' | 'missed'

export interface ScheduleFiring {
  id: string
  scheduleId: string
  occurrence: string
  manual: boolean
  status: FiringStatus
  conversationId: string | null
  runId: string | null
  dispatchId: string | null
  error: { code: string; message: string } | null
  missedCount: number
  createdAt: string
}

function iso(value: Date | string | null): string | null {
  return value === null ? null : new Date(value).toISOString()
}

export function toSchedule(row: Selectable<Schedules>): Schedule {
  return {
    id: row.id,
    projectId: row.project_id,
    ownerId: row.owner_id,
    name: row.name,
    cron: row.cron,
    every: row.every,
    at: iso(row.at),
    timezone: row.timezone,
    target: row.target as unknown as ScheduleTarget,
    enabled: row.enabled,
    missed: row.missed === 'fireOnce' ? 'fireOnce' : 'skip',
    nextFireAt: iso(row.next_fire_at),
    lastFiredAt: iso(row.last_fired_at),
    lastRunId: row.last_run_id,
    stoppedReason: row.stopped_reason,
    createdAt: iso(row.created_at)!,
    updatedAt: iso(row.updated_at)!,
  }
}

function toFiring(row: Selectable<ScheduleFirings>): ScheduleFiring {
  return {
    id: row.id,
    scheduleId: row.schedule_id,
    occurrence: iso(row.occurrence)!,
    manual: row.manual,
    status: row.status as FiringStatus,
    conversationId: row.conversation_id,
    runId: row.run_id,
    dispatchId: row.dispatch_id,
    error: (row.error as ScheduleFiring['error']) ?? null,
    missedCount: row.missed_count,
    createdAt: iso(row.created_at)!,
  }
}

export async function createSchedule(
  db: Executor,
  input: Required<Pick<ScheduleInput, 'target'>> &
    ScheduleInput & { projectId: string; ownerId: string; nextFireAt: Date | null },
): Promise<Schedule> {
  const row = await kysely(db)
    .insertInto('schedules')
    .values({
      id: newId(),
      project_id: input.projectId,
      owner_id: input.ownerId,
      name: input.name ?? '',
      cron: input.cron ?? null,
      every: input.every ?? null,
      at: input.at ? new Date(input.at) : null,
      timezone: input.timezone ?? 'UTC',
      target: storableJson(input.target as unknown as JsonValue),
      enabled: input.enabled ?? true,
      missed: input.missed ?? 'skip',
      next_fire_at: input.nextFireAt,
    })
    .returningAll()
    .executeTakeFirstOrThrow()
  return toSchedule(row)
}

/** A live schedule by id (callers check access to its project). */
export async function getSchedule(db: Executor, id: string): Promise<Schedule | undefined> {
  const row = await kysely(db)
    .selectFrom('schedules')
    .selectAll()
    .where('id', '=', id)
    .where('deleted_at', 'is', null)
    .executeTakeFirst()
  return row && toSchedule(row)
}

export async function listSchedules(db: Executor, projectId: string, page: PageRequest): Promise<Page<Schedule>> {
  let query = kysely(db)
    .selectFrom('schedules')
    .selectAll()
    .where('project_id', '=', projectId)
    .where('deleted_at', 'is', null)
    .orderBy('id')
    .limit(page.limit + 1)
  if (page.after) query = query.where('id', '>', page.after)
  return toPage((await query.execute()).map(toSchedule), page.limit)
}

/** Writes a schedule's changed fields and its next occurrence (null: none). */
export async function updateSchedule(
  db: Executor,
  id: string,
  change: ScheduleInput & { nextFireAt: Date | null; stoppedReason?: string | null },
): Promise<Schedule | undefined> {
  const row = await kysely(db)
    .updateTable('schedules')
    .set({
      ...(change.name !== undefined && { name: change.name }),
      ...(change.cron !== undefined && { cron: change.cron }),
      ...(change.every !== undefined && { every: change.every }),
      ...(change.at !== undefined && { at: change.at === null ? null : new Date(change.at) }),
      ...(change.timezone !== undefined && { timezone: change.timezone }),
      ...(change.target !== undefined && { target: storableJson(change.target as unknown as JsonValue) }),
      ...(change.enabled !== undefined && { enabled: change.enabled }),
      ...(change.missed !== undefined && { missed: change.missed }),
      ...(change.stoppedReason !== undefined && { stopped_reason: change.stoppedReason }),
      next_fire_at: change.nextFireAt,
      updated_at: new Date(),
    })
    .where('id', '=', id)
    .where('deleted_at', 'is', null)
    .returningAll()
    .executeTakeFirst()
  return row && toSchedule(row)
}

export async function deleteSchedule(db: Executor, id: string): Promise<boolean> {
  const result = await kysely(db)
    .updateTable('schedules')
    .set({ deleted_at: new Date(), enabled: false, next_fire_at: null })
    .where('id', '=', id)
    .where('deleted_at', 'is', null)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}

/** Due schedules, locked for this transaction; those another instance is claiming are skipped. */
export async function lockDueSchedules(tx: Executor, now: Date, limit: number): Promise<Schedule[]> {
  const rows = await kysely(tx)
    .selectFrom('schedules')
    .selectAll()
    .where('enabled', '=', true)
    .where('deleted_at', 'is', null)
    .where('next_fire_at', '<=', now)
    .orderBy('next_fire_at')
    .limit(limit)
    .forUpdate()
    .skipLocked()
    .execute()
  return rows.map(toSchedule)
}

/**
 * Records an occurrence (pending: to fire; missed: skipped after downtime) and moves the schedule on,
 * in the claiming transaction. Undefined when the occurrence was recorded before (nothing written).
 */
export async function recordOccurrence(
  tx: Executor,
  schedule: Schedule,
  occurrence: { at: Date; status: 'pending' | 'missed'; missedCount: number; manual?: boolean },
  nextFireAt: Date | null | undefined,
): Promise<ScheduleFiring | undefined> {
  const row = await kysely(tx)
    .insertInto('schedule_firings')
    .values({
      id: newId(),
      schedule_id: schedule.id,
      occurrence: occurrence.at,
      manual: occurrence.manual ?? false,
      status: occurrence.status,
      missed_count: occurrence.missedCount,
    })
    // The index's predicate as a literal: a parameter here is not matched to the partial index by the
    // generic plan Postgres switches a prepared statement to after 5 runs (error 42P10).
    .onConflict((conflict) =>
      conflict
        .columns(['schedule_id', 'occurrence'])
        .where(sql<boolean>`not manual`)
        .doNothing(),
    )
    .returningAll()
    .executeTakeFirst()
  if (nextFireAt !== undefined)
    await kysely(tx)
      .updateTable('schedules')
      .set({ next_fire_at: nextFireAt, ...(row && occurrence.status === 'pending' && { last_fired_at: new Date() }) })
      .where('id', '=', schedule.id)
      .execute()
  return row && toFiring(row)
}

/** Pending firings claimed longer ago than `olderThan` (their instance died before starting them), locked. */
export async function lockStalePendingFirings(tx: Executor, olderThan: Date, limit: number): Promise<ScheduleFiring[]> {
  const rows = await kysely(tx)
    .selectFrom('schedule_firings')
    .selectAll()
    .where('status', '=', 'pending')
    .where('claimed_at', '<', olderThan)
    .orderBy('claimed_at')
    .limit(limit)
    .forUpdate()
    .skipLocked()
    .execute()
  if (rows.length > 0)
    await kysely(tx)
      .updateTable('schedule_firings')
      .set({ claimed_at: new Date() })
      .where(
        'id',
        'in',
        rows.map((row) => row.id),
      )
      .execute()
  return rows.map(toFiring)
}

/**
 * Ties a firing to the conversation it created (so a retry posts there instead of making another);
 * false when it already has one (another instance got there first: the caller rolls back).
 */
export async function setFiringConversation(tx: Executor, firingId: string, conversationId: string): Promise<boolean> {
  const updated = await kysely(tx)
    .updateTable('schedule_firings')
    .set({ conversation_id: conversationId })
    .where('id', '=', firingId)
    .where('conversation_id', 'is', null)
    .executeTakeFirst()
  return updated.numUpdatedRows > 0n
}

/**
 * Marks a pending firing started with its run, in the run's transaction; false when it is no longer
 * pending (another instance started it): the caller rolls back, so each firing has one run.
 */
export async function markFiringStarted(
  tx: Executor,
  firing: ScheduleFiring,
  schedule: Schedule,
  runId: string,
): Promise<boolean> {
  const updated = await kysely(tx)
    .updateTable('schedule_firings')
    .set({ status: 'started', run_id: runId })
    .where('id', '=', firing.id)
    .where('status', '=', 'pending')
    .executeTakeFirst()
  if (updated.numUpdatedRows === 0n) return false
  await kysely(tx).updateTable('schedules').set({ last_run_id: runId }).where('id', '=', schedule.id).execute()
  await appendEvents(tx, [
    {
      type: 'schedule.fired',
      projectId: schedule.projectId,
      userId: schedule.ownerId,
      data: { scheduleId: schedule.id, firingId: firing.id, occurrence: firing.occurrence, runId },
    },
  ])
  return true
}

/** A command target's firing: its dispatch was made (whatever its outcome, which is the dispatch's). */
export async function markFiringDispatched(
  tx: Executor,
  firing: ScheduleFiring,
  schedule: Schedule,
  dispatchId: string,
): Promise<void> {
  const updated = await kysely(tx)
    .updateTable('schedule_firings')
    .set({ status: 'started', dispatch_id: dispatchId })
    .where('id', '=', firing.id)
    .where('status', '=', 'pending')
    .executeTakeFirst()
  if (updated.numUpdatedRows === 0n) return
  await appendEvents(tx, [
    {
      type: 'schedule.fired',
      projectId: schedule.projectId,
      userId: schedule.ownerId,
      data: { scheduleId: schedule.id, firingId: firing.id, occurrence: firing.occurrence, dispatchId },
    },
  ])
}

/** A firing that could not start its run (refused, or its owner lost access). */
export async function markFiringFailed(
  db: Executor,
  firingId: string,
  error: { code: string; message: string },
): Promise<void> {
  await kysely(db)
    .updateTable('schedule_firings')
    .set({ status: 'failed', error: storableJson(error) })
    .where('id', '=', firingId)
    .where('status', '=', 'pending')
    .execute()
}

/** The server stops a schedule (its owner lost access): disabled, with why, and an event saying so. */
export async function stopSchedule(tx: Executor, schedule: Schedule, reason: string): Promise<void> {
  await kysely(tx)
    .updateTable('schedules')
    .set({ enabled: false, stopped_reason: reason, next_fire_at: null, updated_at: new Date() })
    .where('id', '=', schedule.id)
    .execute()
  await appendEvents(tx, [
    {
      type: 'schedule.stopped',
      projectId: schedule.projectId,
      userId: schedule.ownerId,
      data: { scheduleId: schedule.id, reason },
    },
  ])
}

/** A schedule's firings, newest first. */
export async function listFirings(db: Executor, scheduleId: string, page: PageRequest): Promise<Page<ScheduleFiring>> {
  let query = kysely(db)
    .selectFrom('schedule_firings')
    .selectAll()
    .where('schedule_id', '=', scheduleId)
    .orderBy('id', 'desc')
    .limit(page.limit + 1)
  if (page.after) query = query.where('id', '<', page.after)
  return toPage((await query.execute()).map(toFiring), page.limit)
}

export async function getFiring(db: Executor, id: string): Promise<ScheduleFiring | undefined> {
  const row = await kysely(db).selectFrom('schedule_firings').selectAll().where('id', '=', id).executeTakeFirst()
  return row && toFiring(row)
}

/** How many schedules (not deleted) a project holds, counted under a lock on the project's schedules. */
export async function lockedScheduleCount(tx: Executor, projectId: string): Promise<number> {
  await sql`select pg_advisory_xact_lock(hashtext(${`plinth.schedules:${projectId}`}))`.execute(kysely(tx))
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from schedules where project_id = ${projectId} and deleted_at is null`.execute(kysely(tx))
  return rows[0]?.n ?? 0
}
