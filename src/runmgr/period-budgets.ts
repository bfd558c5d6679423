import type { ModelPricing } from '../llm/index.js'
import { budgetsFor, spentSince, type Executor, type Store } from '../store/index.js'
import { budgetWindows, periodStop, type BudgetStop } from './budget.js'
import { RunRequestError } from './run-errors.js'

/** Whose spending a run counts into. */
export interface SpendingScope {
  projectId: string
  userId: string
}

/**
 * Project and user budgets per UTC day and month (docs/guides/operating.md#budgets), read from the
 * database each time: every instance sees every other's calls, and a raised budget applies at once.
 */
export class PeriodBudgets {
  readonly #store: Store
  readonly #now: () => Date

  constructor(store: Store, now: () => Date = () => new Date()) {
    this.#store = store
    this.#now = now
  }

  /** Before a model call of `promptTokens`: the budget it would cross, if any. One read without budgets. */
  async stop(
    scope: SpendingScope,
    promptTokens: number,
    pricing: ModelPricing | undefined,
    db: Executor = this.#store,
  ): Promise<BudgetStop | undefined> {
    const budgets = await budgetsFor(db, scope.projectId, scope.userId)
    if (!budgets.project && !budgets.user) return undefined
    const windows = budgetWindows(this.#now())
    const spending = await spentSince(db, scope, windows)
    return periodStop(budgets, spending, windows, promptTokens, pricing)
  }

  /** Before a new run (or a resume): 429 `budget_exceeded` while a period budget is spent. */
  async refuseWhenSpent(scope: SpendingScope, db: Executor = this.#store): Promise<void> {
    const spent = await this.stop(scope, 0, undefined, db)
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
