import type { JsonValue } from '../extension/index.js'
import type { ModelPricing } from '../llm/index.js'
import type { Run } from '../store/index.js'

/** Why a run may not call its model again: its `failed` error (`budget_exceeded`, naming the limit). */
export interface BudgetStop {
  code: 'budget_exceeded'
  message: string
  budget: { scope: 'run'; limit: 'maxModelCalls' | 'maxTokens' | 'maxCost'; value: number; used: number }
  [key: string]: JsonValue
}

/**
 * Checked before each model call (docs/guides/operating.md#budgets): a limit already reached, or one
 * the next call would cross by its prompt alone (an estimate: `promptTokens`, and its cost at the
 * model's input price). Undefined: the call may go.
 */
export function budgetStop(run: Run, promptTokens: number, pricing: ModelPricing | undefined): BudgetStop | undefined {
  const budget = run.budget
  if (!budget) return undefined
  const usage = run.usage
  const stop = (limit: BudgetStop['budget']['limit'], value: number, used: number, unit: string): BudgetStop => ({
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
    const next = pricing ? (promptTokens * pricing.inputPerMillion) / 1_000_000 : 0
    if (spent + next > budget.maxCost) return stop('maxCost', budget.maxCost, roundCost(spent), 'spent')
  }
  return undefined
}

/** A cost as shown in messages and errors (floating sums carry noise past a billionth). */
function roundCost(cost: number): number {
  return Math.round(cost * 1e9) / 1e9
}
