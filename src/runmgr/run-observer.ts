/** Told about what runs do, for metrics. Every method is optional and must not throw. */
export interface RunObserver {
  modelCall?(figures: { model: string; durationMs: number; outcome: string }): void
  toolCall?(figures: { status: string }): void
  runEnded?(figures: { status: string; durationMs: number | null }): void
}
