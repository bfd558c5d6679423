import { sql } from 'kysely'
import { kysely, type Executor } from './executor.js'
import { storableJson } from './storable.js'
import { runBudget, type RunBudget } from './run-repository.js'

/** The most a period's model calls may add up to; each limit optional. */
export type PeriodLimits = {
  /** Input plus output tokens. */
  maxTokens?: number
  /** In the configured currency (calls of models without a price count nothing). */
  maxCost?: number
}

/** Budgets per UTC day and calendar month (docs/guides/operating.md#budgets). */
export type PeriodBudget = {
  daily?: PeriodLimits
  monthly?: PeriodLimits
}

/** A project's budget: its periods, and the run budget its runs take unless they set their own. */
export type ProjectBudget = PeriodBudget & { run?: RunBudget }

export const budgetPeriods = ['daily', 'monthly'] as const
export type BudgetPeriod = (typeof budgetPeriods)[number]

function periodLimits(stored: unknown): PeriodLimits | undefined {
  if (stored === null || typeof stored !== 'object') return undefined
  const value = stored as Record<string, unknown>
  const limits: PeriodLimits = {}
  for (const key of ['maxTokens', 'maxCost'] as const) if (typeof value[key] === 'number') limits[key] = value[key]
  return Object.keys(limits).length > 0 ? limits : undefined
}

/** A stored project or user budget (null: none). */
export function projectBudget(stored: unknown): ProjectBudget | null {
  if (stored === null || typeof stored !== 'object') return null
  const value = stored as Record<string, unknown>
  const budget: ProjectBudget = {}
  for (const period of budgetPeriods) {
    const limits = periodLimits(value[period])
    if (limits) budget[period] = limits
  }
  const run = runBudget(value.run)
  if (run) budget.run = run
  return Object.keys(budget).length > 0 ? budget : null
}

/** A budget as stored: an empty one is none. */
export function storableBudget(budget: ProjectBudget | null): ReturnType<typeof storableJson> | null {
  const kept = projectBudget(budget)
  return kept ? storableJson(kept) : null
}

/** The period budgets a new run or model call of `userId` in `projectId` answers to. */
export async function budgetsFor(
  db: Executor,
  projectId: string,
  userId: string,
): Promise<{ project: PeriodBudget | null; user: PeriodBudget | null }> {
  const row = await kysely(db)
    .selectFrom('users')
    .leftJoin('projects', (join) => join.on('projects.id', '=', projectId))
    .select(['users.budget as user_budget', 'projects.budget as project_budget'])
    .where('users.id', '=', userId)
    .executeTakeFirst()
  return { project: periodBudget(row?.project_budget ?? null), user: periodBudget(row?.user_budget ?? null) }
}

/** The period part of a stored budget (null: no period limit). */
export function periodBudget(stored: unknown): PeriodBudget | null {
  const budget = projectBudget(stored)
  const periods: PeriodBudget = {
    ...(budget?.daily && { daily: budget.daily }),
    ...(budget?.monthly && { monthly: budget.monthly }),
  }
  return Object.keys(periods).length > 0 ? periods : null
}

/** Tokens (input plus output) and cost spent since a time. */
export interface Spent {
  tokens: number
  cost: number
}

/** What a project's and a user's model calls spent since the start of the day and of the month. */
export type PeriodSpending = Record<'project' | 'user', Record<BudgetPeriod, Spent>>

/**
 * One read of the calls since `monthStart` by the project or the user: the four sums a budget check
 * compares (docs/guides/operating.md#budgets). Indexed by (project_id, created_at) and (owner_id, created_at).
 */
export async function spentSince(
  db: Executor,
  scope: { projectId: string; userId: string },
  since: { dayStart: Date; monthStart: Date },
): Promise<PeriodSpending> {
  const { projectId, userId } = scope
  const day = since.dayStart
  const result = await sql<Record<string, number>>`
    select
      coalesce(sum(input_tokens + output_tokens) filter (where project_id = ${projectId}), 0)::float8 as pm_tokens,
      coalesce(sum(cost) filter (where project_id = ${projectId}), 0)::float8 as pm_cost,
      coalesce(sum(input_tokens + output_tokens) filter (where project_id = ${projectId} and created_at >= ${day}), 0)::float8 as pd_tokens,
      coalesce(sum(cost) filter (where project_id = ${projectId} and created_at >= ${day}), 0)::float8 as pd_cost,
      coalesce(sum(input_tokens + output_tokens) filter (where owner_id = ${userId}), 0)::float8 as um_tokens,
      coalesce(sum(cost) filter (where owner_id = ${userId}), 0)::float8 as um_cost,
      coalesce(sum(input_tokens + output_tokens) filter (where owner_id = ${userId} and created_at >= ${day}), 0)::float8 as ud_tokens,
      coalesce(sum(cost) filter (where owner_id = ${userId} and created_at >= ${day}), 0)::float8 as ud_cost
    from model_calls
    where (project_id = ${projectId} or owner_id = ${userId}) and created_at >= ${since.monthStart}`.execute(kysely(db))
  const row = result.rows[0] ?? {}
  const spent = (prefix: string): Spent => ({
    tokens: Number(row[`${prefix}_tokens`] ?? 0),
    cost: Number(row[`${prefix}_cost`] ?? 0),
  })
  return {
    project: { daily: spent('pd'), monthly: spent('pm') },
    user: { daily: spent('ud'), monthly: spent('um') },
  }
}

/** Sets (or, with null, removes) a user's period budget; undefined when there is no such user. */
export async function setUserBudget(db: Executor, userId: string, budget: PeriodBudget | null): Promise<boolean> {
  const result = await kysely(db)
    .updateTable('users')
    .set({ budget: storableBudget(budget && periodBudget(budget)) })
    .where('id', '=', userId)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}
