import { metrics, type Histogram } from '@opentelemetry/api'

// The metrics API has no proxy: the instruments are made from the provider registered at the time,
// and made again when startOtel registers one.
let tokenUsage: Histogram | undefined
let operationDuration: Histogram | undefined

/** Forgets the instruments, so the next call makes them from the meter provider now registered. */
export function resetGenAiMetrics(): void {
  tokenUsage = undefined
  operationDuration = undefined
}

/**
 * One model call in the GenAI metrics (`gen_ai.client.token.usage`, `gen_ai.client.operation.duration`):
 * tokens by type, and the call's duration with its error type when it failed.
 */
export function recordModelCall(figures: {
  provider: string
  model: string
  durationMs: number
  errorType?: string
  inputTokens?: number
  outputTokens?: number
}): void {
  const meter = metrics.getMeter('plinth')
  tokenUsage ??= meter.createHistogram('gen_ai.client.token.usage', {
    description: 'Tokens used per model call, by type',
    unit: '{token}',
    advice: { explicitBucketBoundaries: [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576] },
  })
  operationDuration ??= meter.createHistogram('gen_ai.client.operation.duration', {
    description: 'Model call duration (the whole streamed turn)',
    unit: 's',
    advice: {
      explicitBucketBoundaries: [
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
      ],
    },
  })
  const attributes = {
    'gen_ai.operation.name': 'chat',
    'gen_ai.provider.name': figures.provider,
    'gen_ai.request.model': figures.model,
  }
  operationDuration.record(figures.durationMs / 1000, {
    ...attributes,
    ...(figures.errorType && { 'error.type': figures.errorType }),
  })
  if (figures.inputTokens !== undefined)
    tokenUsage.record(figures.inputTokens, { ...attributes, 'gen_ai.token.type': 'input' })
  if (figures.outputTokens !== undefined)
    tokenUsage.record(figures.outputTokens, { ...attributes, 'gen_ai.token.type': 'output' })
}
