import type { LedgerObserver } from '../cmdbus/index.js'

/** Told about what runs do, for metrics. Every method is optional and must not throw. */
export interface RunObserver extends LedgerObserver {
  modelCall?(figures: { model: string; durationMs: number; outcome: string }): void
}
