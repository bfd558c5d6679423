import type { Usage } from './model.js'

/**
 * A model's price per million tokens, in the configured currency (`models[].pricing`;
 * docs/guides/operating.md#usage-and-cost). Cached input costs `cachedInputPerMillion` where given, else
 * the input price.
 */
export interface ModelPricing {
  inputPerMillion: number
  outputPerMillion: number
  cachedInputPerMillion?: number
}

/** What one call cost; null without a price. Input counts cached input, which may be priced apart. */
export function costOf(usage: Usage, pricing: ModelPricing | undefined): number | null {
  if (!pricing) return null
  const cached = Math.min(usage.cachedInputTokens ?? 0, usage.inputTokens)
  const cost =
    (usage.inputTokens - cached) * pricing.inputPerMillion +
    cached * (pricing.cachedInputPerMillion ?? pricing.inputPerMillion) +
    usage.outputTokens * pricing.outputPerMillion
  return cost / 1_000_000
}
