import type { LedgerObserver } from '../cmdbus/index.js'
import type { ModelCallUsage } from '../store/index.js'

/** Told about what runs do, for metrics. Every method is optional and must not throw. */
export interface RunObserver extends LedgerObserver {
  /** `usage`: what the call used and cost, when it was made (absent: stopped before it finished). */
  modelCall?(figures: { model: string; durationMs: number; outcome: string; usage?: ModelCallUsage }): void
}
