import type { JsonValue } from '../extension/index.js'
import type { ModelPricing } from '../llm/index.js'
import type { BudgetPeriod, PeriodBudget, PeriodLimits, PeriodSpending, Run } from '../store/index.js'

/** The run's own budget that was hit. */
export interface RunBudgetHit {
  scope: 'run'
  limit: 'maxModelCalls' | 'maxTokens' | 'maxCost'
  value: number
  used: number
  [key: string]: JsonValue
}

/** A project's or user's budget for a period that was hit, and when the period resets. */
export interface PeriodBudgetHit {
  scope: 'project' | 'user'
  period: BudgetPeriod
  limit: 'maxTokens' | 'maxCost'
  value: number
  used: number
  resetAt: string
  [key: string]: JsonValue
}

/** Why a run may not call its model again: its `failed` error (`budget_exceeded`, naming the budget). */
export interface BudgetStop {
  code: 'budget_exceeded'
  message: string
  budget: RunBudgetHit | PeriodBudgetHit
  [key: string]: JsonValue
}

/**
 * Checked before each model call (docs/guides/operating.md#budgets): a limit already reached, or one
 * the next call would cross by its prompt alone (an estimate: `promptTokens`, and its cost at the
 * model's input price). Undefined: the call may go.
 */
export function budgetStop(run: Run, prompt: PromptTokens, pricing: ModelPricing | undefined): BudgetStop | undefined {
  const budget = run.budget
  if (!budget) return undefined
  const promptTokens = tokensOf(prompt)
  const usage = run.usage
  const stop = (limit: RunBudgetHit['limit'], value: number, used: number, unit: string): BudgetStop => ({
    code: 'budget_exceeded',
    message: `the run's budget ${limit} (${value}) is spent: ${used} ${unit} so far, and the next model call would cross it; raise it and resume the run`,
    budget: { scope: 'run', limit, value, used },
  })
  if (budget.maxModelCalls !== undefined && usage.modelCalls >= budget.maxModelCalls)
    return stop('maxModelCalls', budget.maxModelCalls, usage.modelCalls, 'model calls')
  const tokens = usage.inputTokens + usage.outputTokens
  if (budget.maxTokens !== undefined && tokens + promptTokens > budget.maxTokens)
    return stop('maxTokens', budget.maxTokens, tokens, 'tokens')
  if (budget.maxCost !== undefined) {
    const spent = usage.cost ?? 0
    const next = nextCost(promptTokens, pricing)
    if (spent + next > budget.maxCost) return stop('maxCost', budget.maxCost, roundCost(spent), 'spent')
  }
  return undefined
}

/** The current UTC day and month: where their spending starts, and when each resets. */
export interface BudgetWindows {
  dayStart: Date
  monthStart: Date
  resets: Record<BudgetPeriod, Date>
}

export function budgetWindows(now: Date): BudgetWindows {
  const year = now.getUTCFullYear()
  const month = now.getUTCMonth()
  const day = now.getUTCDate()
  return {
    dayStart: new Date(Date.UTC(year, month, day)),
    monthStart: new Date(Date.UTC(year, month, 1)),
    resets: { daily: new Date(Date.UTC(year, month, day + 1)), monthly: new Date(Date.UTC(year, month + 1, 1)) },
  }
}

/**
 * The first project or user period budget that is spent, or that the next call (of `promptTokens`)
 * would cross. With `promptTokens` 0 (a new run): one already spent.
 */
export function periodStop(
  budgets: Record<'project' | 'user', PeriodBudget | null>,
  spending: PeriodSpending,
  windows: BudgetWindows,
  prompt: PromptTokens,
  pricing: ModelPricing | undefined,
): BudgetStop | undefined {
  for (const scope of ['project', 'user'] as const) {
    const budget = budgets[scope]
    if (!budget) continue
    const promptTokens = tokensOf(prompt)
    for (const period of ['daily', 'monthly'] as const) {
      const limits: PeriodLimits | undefined = budget[period]
      if (!limits) continue
      const spent = spending[scope][period]
      const resetAt = windows.resets[period].toISOString()
      const hit = (limit: PeriodBudgetHit['limit'], value: number, used: number): BudgetStop => ({
        code: 'budget_exceeded',
        message: `the ${scope}'s ${period} budget ${limit} (${value}) is spent: ${used} so far${promptTokens > 0 ? ', and the next model call would cross it' : ''}; it resets at ${resetAt}, or raise it and resume the run`,
        budget: { scope, period, limit, value, used, resetAt },
      })
      if (limits.maxTokens !== undefined && crosses(spent.tokens, promptTokens, limits.maxTokens))
        return hit('maxTokens', limits.maxTokens, spent.tokens)
      if (limits.maxCost !== undefined && crosses(spent.cost, nextCost(promptTokens, pricing), limits.maxCost))
        return hit('maxCost', limits.maxCost, roundCost(spent.cost))
    }
  }
  return undefined
}

/** Nothing is left, or the next step would go past the limit. */
function crosses(used: number, next: number, limit: number): boolean {
  return used >= limit || used + next > limit
}

/**
 * The next prompt's size in tokens, or how to estimate it: serialising a long conversation's prompt
 * costs milliseconds a round, spent only when a budget needs the figure.
 */
export type PromptTokens = number | (() => number)

function tokensOf(prompt: PromptTokens): number {
  return typeof prompt === 'number' ? prompt : prompt()
}

/** What a prompt of `promptTokens` costs at the model's input price (0 without one). */
function nextCost(promptTokens: number, pricing: ModelPricing | undefined): number {
  return pricing ? (promptTokens * pricing.inputPerMillion) / 1_000_000 : 0
}

/** A cost as shown in messages and errors (floating sums carry noise past a billionth). */
function roundCost(cost: number): number {
  return Math.round(cost * 1e9) / 1e9
}
