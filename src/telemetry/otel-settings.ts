/** What the standard `OTEL_*` variables ask of Plinth (docs/guides/operating.md#tracing). */
export interface OtelSettings {
  traces: boolean
  metrics: boolean
  protocol: 'http/protobuf' | 'http/json'
  metricsProtocol: 'http/protobuf' | 'http/json'
  /** Prompts, completions and tool arguments on spans: only on explicit opt-in. */
  captureContent: boolean
  /** `OTEL_METRIC_EXPORT_INTERVAL`, ms. */
  metricIntervalMs: number
  sampler: { name: string; ratio: number }
  batch: {
    maxQueueSize?: number
    scheduledDelayMillis?: number
    maxExportBatchSize?: number
    exportTimeoutMillis?: number
  }
  /** Values we could not use, said at start. */
  warnings: string[]
}

const samplers = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
]

/**
 * Tracing and metrics are off unless an OTLP endpoint (or `OTEL_TRACES_EXPORTER=otlp`) is configured;
 * `OTEL_SDK_DISABLED=true` or an exporter of `none` turns them off.
 */
export function otelSettings(env: NodeJS.ProcessEnv = process.env): OtelSettings {
  const warnings: string[] = []
  const set = (name: string) => {
    const value = env[name]?.trim()
    return value ? value : undefined
  }
  const disabled = set('OTEL_SDK_DISABLED')?.toLowerCase() === 'true'
  const endpoint = set('OTEL_EXPORTER_OTLP_ENDPOINT')
  const wanted = (signal: 'TRACES' | 'METRICS') => {
    const exporter = set(`OTEL_${signal}_EXPORTER`)?.toLowerCase()
    if (exporter && exporter !== 'otlp' && exporter !== 'none')
      warnings.push(`OTEL_${signal}_EXPORTER=${exporter} is not supported (only otlp or none); it is ignored`)
    if (disabled || exporter === 'none') return false
    return Boolean(endpoint ?? set(`OTEL_EXPORTER_OTLP_${signal}_ENDPOINT`)) || exporter === 'otlp'
  }
  const protocolOf = (name: string, fallback: OtelSettings['protocol']): OtelSettings['protocol'] => {
    const value = set(name)
    if (value === undefined) return fallback
    if (value === 'http/protobuf' || value === 'http/json') return value
    warnings.push(`${name}=${value} is not supported (http/protobuf or http/json); using ${fallback}`)
    return fallback
  }
  const numberOf = (name: string): number | undefined => {
    const value = set(name)
    if (value === undefined) return undefined
    const number = Number(value)
    if (Number.isFinite(number) && number >= 0) return number
    warnings.push(`${name}=${value} is not a non-negative number; it is ignored`)
    return undefined
  }
  const protocol = protocolOf('OTEL_EXPORTER_OTLP_PROTOCOL', 'http/protobuf')
  let sampler = set('OTEL_TRACES_SAMPLER')?.toLowerCase() ?? 'parentbased_always_on'
  if (!samplers.includes(sampler)) {
    warnings.push(`OTEL_TRACES_SAMPLER=${sampler} is not supported; using parentbased_always_on`)
    sampler = 'parentbased_always_on'
  }
  const ratio = numberOf('OTEL_TRACES_SAMPLER_ARG') ?? 1
  const batch = {
    maxQueueSize: numberOf('OTEL_BSP_MAX_QUEUE_SIZE'),
    scheduledDelayMillis: numberOf('OTEL_BSP_SCHEDULE_DELAY'),
    maxExportBatchSize: numberOf('OTEL_BSP_MAX_EXPORT_BATCH_SIZE'),
    exportTimeoutMillis: numberOf('OTEL_BSP_EXPORT_TIMEOUT'),
  }
  return {
    traces: wanted('TRACES'),
    metrics: wanted('METRICS'),
    protocol: protocolOf('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', protocol),
    metricsProtocol: protocolOf('OTEL_EXPORTER_OTLP_METRICS_PROTOCOL', protocol),
    captureContent: set('OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT')?.toLowerCase() === 'true',
    metricIntervalMs: numberOf('OTEL_METRIC_EXPORT_INTERVAL') ?? 60_000,
    sampler: { name: sampler, ratio: Math.min(1, ratio) },
    batch: Object.fromEntries(Object.entries(batch).filter(([, value]) => value !== undefined)),
    warnings,
  }
}
