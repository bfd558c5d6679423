import { describe, expect, it } from 'vitest'
import { otelSettings } from '../../src/telemetry/index.js'

// What the standard OTEL_* variables turn on (docs/guides/operating.md#tracing).
describe('OpenTelemetry settings from the environment', () => {
  it('is off unless an OTLP endpoint or the otlp exporter is configured', () => {
    expect(otelSettings({})).toMatchObject({ traces: false, metrics: false, warnings: [] })
    expect(otelSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toMatchObject({
      traces: true,
      metrics: true,
      protocol: 'http/protobuf',
      captureContent: false,
    })
    expect(otelSettings({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' })).toMatchObject({
      traces: true,
      metrics: false,
    })
    expect(otelSettings({ OTEL_TRACES_EXPORTER: 'otlp' })).toMatchObject({ traces: true })
  })

  it('OTEL_SDK_DISABLED and exporters of none turn it off', () => {
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }
    expect(otelSettings({ ...endpoint, OTEL_SDK_DISABLED: 'true' })).toMatchObject({ traces: false, metrics: false })
    expect(otelSettings({ ...endpoint, OTEL_METRICS_EXPORTER: 'none' })).toMatchObject({ traces: true, metrics: false })
    expect(otelSettings({ ...endpoint, OTEL_TRACES_EXPORTER: 'none' })).toMatchObject({ traces: false, metrics: true })
  })

  it('takes the per-signal protocol over the general one, and warns about what it cannot use', () => {
    const settings = otelSettings({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: 'http/protobuf',
    })
    expect(settings).toMatchObject({ protocol: 'http/json', metricsProtocol: 'http/protobuf' })
    const grpc = otelSettings({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4317',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
      OTEL_BSP_MAX_QUEUE_SIZE: 'lots',
      OTEL_TRACES_EXPORTER: 'zipkin',
    })
    expect(grpc.protocol).toBe('http/protobuf')
    expect([...grpc.warnings].sort()).toEqual([
      'OTEL_BSP_MAX_QUEUE_SIZE=lots is not a non-negative number; it is ignored',
      'OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported (http/protobuf or http/json); using http/protobuf',
      'OTEL_TRACES_EXPORTER=zipkin is not supported (only otlp or none); it is ignored',
    ])
  })

  it('records content only on the explicit opt-in', () => {
    expect(otelSettings({ OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true' }).captureContent).toBe(true)
    expect(otelSettings({ OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: '1' }).captureContent).toBe(false)
  })
})
