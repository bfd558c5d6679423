// Tracing and GenAI metrics (docs/guides/operating.md#tracing): spans and metrics through the
// OpenTelemetry API, no-ops until startOtel registers the SDK.
export {
  activeTraceParent,
  annotateSpan,
  inSpan,
  failSpan,
  injectTraceHeaders,
  openSpan,
  setContent,
  traceHeadersOf,
  withTraceHeaders,
  withinTraceParent,
} from './spans.js'
export { SpanKind, type Span } from '@opentelemetry/api'
export { recordModelCall } from './gen-ai-metrics.js'
export { otelSettings, type OtelSettings } from './otel-settings.js'
export { startOtel, type Otel, type OtelOptions } from './otel-sdk.js'
