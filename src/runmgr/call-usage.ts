import { costOf, type ModelPricing, type Usage } from '../llm/index.js'
import type { ModelCallUsage } from '../store/index.js'

/** A call's reported tokens as counted (cached input and reasoning 0 when the provider did not say), priced. */
export function countedUsage(reported: Usage, pricing: ModelPricing | undefined): ModelCallUsage {
  return {
    inputTokens: reported.inputTokens,
    outputTokens: reported.outputTokens,
    cachedInputTokens: reported.cachedInputTokens ?? 0,
    reasoningTokens: reported.reasoningTokens ?? 0,
    cost: costOf(reported, pricing),
  }
}
