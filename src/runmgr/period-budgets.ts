import type { ModelPricing } from '../llm/index.js'
import { periodStanding, periodStandingRead, type ProjectIdSql, type TransitionRead } from '../store/index.js'
import { budgetWindows, periodStop, type BudgetStop, type PromptTokens } from './budget.js'
import { RunRequestError } from './run-errors.js'

/** Whose spending a run counts into. */
export interface SpendingScope {
  projectId: ProjectIdSql
  userId: string
}

/** A check prepared for one moment: the read to carry in a statement, and the verdict on what it read. */
export interface PeriodCheck {
  read: TransitionRead
  /** Before a model call of `promptTokens`: the budget it would cross, if any. */
  stop(readValue: unknown, promptTokens: PromptTokens, pricing: ModelPricing | undefined): BudgetStop | undefined
}

/**
 * Project and user budgets per UTC day and month (docs/guides/operating.md#budgets), read from the
 * database at each check: every instance sees every other's calls, and a raised budget applies at once.
 */
export class PeriodBudgets {
  readonly #now: () => Date

  constructor(now: () => Date = () => new Date()) {
    this.#now = now
  }

  /** A check whose read the statement opening a round carries (no round trip of its own). */
  check(scope: SpendingScope): PeriodCheck {
    const windows = budgetWindows(this.#now())
    return {
      read: periodStandingRead(scope, windows),
      stop: (readValue, promptTokens, pricing) => {
        const { budgets, spending } = periodStanding(readValue)
        return periodStop(budgets, spending, windows, promptTokens, pricing)
      },
    }
  }

  /** Before a new run (or a resume), on what `check.read` found: 429 `budget_exceeded` while a period budget is spent. */
  refuseWhenSpent(check: PeriodCheck, readValue: unknown): void {
    const spent = check.stop(readValue, 0, undefined)
    if (!spent || spent.budget.scope === 'run') return
    const resetAt = spent.budget.resetAt
    throw new RunRequestError(
      'budget_exceeded',
      `the ${spent.budget.scope}'s ${spent.budget.period} budget ${spent.budget.limit} (${spent.budget.value}) is spent (${spent.budget.used}); new runs start again at ${resetAt}, or when it is raised`,
      {
        extensions: { budget: spent.budget, resetAt },
        retryAfter: Math.max(1, Math.ceil((Date.parse(resetAt) - this.#now().getTime()) / 1000)),
      },
    )
  }
}
