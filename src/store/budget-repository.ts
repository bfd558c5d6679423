import { sql, type RawBuilder } from 'kysely'
import { kysely, type Executor } from './executor.js'
import { storableJson } from './storable.js'
import type { ProjectIdSql } from './run-quota-repository.js'
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

/** The period budgets that apply to a user's calls in a project, and what those spent so far. */
export interface PeriodStanding {
  budgets: Record<'project' | 'user', PeriodBudget | null>
  spending: PeriodSpending
}

/** Tokens (input plus output) and cost spent since a time. */
export interface Spent {
  tokens: number
  cost: number
}

/** What a project's and a user's model calls spent since the start of the day and of the month. */
export type PeriodSpending = Record<'project' | 'user', Record<BudgetPeriod, Spent>>

const nothingSpent: PeriodSpending = {
  project: { daily: { tokens: 0, cost: 0 }, monthly: { tokens: 0, cost: 0 } },
  user: { daily: { tokens: 0, cost: 0 }, monthly: { tokens: 0, cost: 0 } },
}

/**
 * The project's and the user's budgets and, only when either has a period limit, the four sums a check
 * compares: one subquery, carried by the statement that opens a round (no round trip of its own) or
 * run alone. The sums read the calls since `monthStart`, by (project_id, created_at) and
 * (owner_id, created_at).
 */
export function periodStandingRead(
  scope: { projectId: ProjectIdSql; userId: string },
  since: { dayStart: Date; monthStart: Date },
): RawBuilder<unknown> {
  const { projectId, userId } = scope
  const day = since.dayStart
  const sums = (column: 'project_id' | 'owner_id', id: ProjectIdSql) => sql`jsonb_build_object(
      'daily', jsonb_build_object(
        'tokens', coalesce(sum(input_tokens + output_tokens) filter (where ${sql.ref(column)} = ${id} and created_at >= ${day}), 0),
        'cost', coalesce(sum(cost) filter (where ${sql.ref(column)} = ${id} and created_at >= ${day}), 0)),
      'monthly', jsonb_build_object(
        'tokens', coalesce(sum(input_tokens + output_tokens) filter (where ${sql.ref(column)} = ${id}), 0),
        'cost', coalesce(sum(cost) filter (where ${sql.ref(column)} = ${id}), 0)))`
  const hasPeriods = (budget: RawBuilder<unknown>) => sql`coalesce(${budget} ?| array['daily', 'monthly'], false)`
  return sql`select jsonb_build_object(
      'project', p.budget,
      'user', u.budget,
      'spending', case when ${hasPeriods(sql`p.budget`)} or ${hasPeriods(sql`u.budget`)} then (
        select jsonb_build_object('project', ${sums('project_id', projectId)}, 'user', ${sums('owner_id', userId)})
        from model_calls
        where (project_id = ${projectId} or owner_id = ${userId}) and created_at >= ${since.monthStart}
      ) end)
    from users u left join projects p on p.id = ${projectId}
    where u.id = ${userId}`
}

/** The standing a `periodStandingRead` found. */
export function periodStanding(read: unknown): PeriodStanding {
  const value = (read && typeof read === 'object' ? read : {}) as Record<string, unknown>
  const spending = value.spending && typeof value.spending === 'object' ? (value.spending as PeriodSpending) : undefined
  const spent = (scope: 'project' | 'user', period: BudgetPeriod): Spent => ({
    tokens: Number(spending?.[scope]?.[period]?.tokens ?? 0),
    cost: Number(spending?.[scope]?.[period]?.cost ?? 0),
  })
  return {
    budgets: { project: periodBudget(value.project ?? null), user: periodBudget(value.user ?? null) },
    spending: spending
      ? {
          project: { daily: spent('project', 'daily'), monthly: spent('project', 'monthly') },
          user: { daily: spent('user', 'daily'), monthly: spent('user', 'monthly') },
        }
      : nothingSpent,
  }
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

/** Sets (or, with null, removes) a user's period budget; undefined when there is no such user. */
export async function setUserBudget(db: Executor, userId: string, budget: PeriodBudget | null): Promise<boolean> {
  const result = await kysely(db)
    .updateTable('users')
    .set({ budget: storableBudget(budget && periodBudget(budget)) })
    .where('id', '=', userId)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}
