import { context, diag, metrics, propagation, trace, DiagLogLevel, type Attributes } from '@opentelemetry/api'
import type { Context } from '@opentelemetry/api'
import type { ReadableSpan, SpanProcessor } from '@opentelemetry/sdk-trace'
import type { FastifyPluginCallback } from 'fastify'
import type { OtelSettings } from './otel-settings.js'
import { resetGenAiMetrics } from './gen-ai-metrics.js'
import { configureContent } from './spans.js'

/** The running OpenTelemetry SDK: its HTTP server instrumentation, and a flush-and-stop. */
export interface Otel {
  /** Registered before the routes: a server span per request, continuing an incoming `traceparent`. */
  fastifyPlugin?: FastifyPluginCallback
  shutdown(): Promise<void>
}

export interface OtelOptions {
  serviceVersion: string
  /** Where exporter failures are said (at most one line a minute: a collector that is down is not a flood). */
  warn: (message: string) => void
  /** Scrubs secrets from text, like log lines: every span attribute passes through it before export. */
  scrub: (text: string) => string
}

/**
 * Starts the OpenTelemetry SDK as the settings say. Its packages are loaded only here, so a server
 * without tracing pays nothing for them.
 */
export async function startOtel(settings: OtelSettings, options: OtelOptions): Promise<Otel> {
  const [api, core, resources, hooks] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/core'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/context-async-hooks'),
  ])
  let lastWarning = 0
  const warn = (message: string) => {
    if (Date.now() - lastWarning < 60_000) return
    lastWarning = Date.now()
    options.warn(options.scrub(`opentelemetry: ${message}`))
  }
  diag.setLogger(
    {
      error: (message) => warn(message),
      warn: (message) => warn(message),
      info: () => {},
      debug: () => {},
      verbose: () => {},
    },
    { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
  )
  const resource = resources
    .resourceFromAttributes({ 'service.name': 'plinth', 'service.version': options.serviceVersion })
    .merge(resources.detectResources({ detectors: [resources.envDetector] }))
  context.setGlobalContextManager(new hooks.AsyncLocalStorageContextManager().enable())
  propagation.setGlobalPropagator(
    new core.CompositePropagator({
      propagators: [new core.W3CTraceContextPropagator(), new core.W3CBaggagePropagator()],
    }),
  )
  configureContent({ capture: settings.captureContent, scrub: options.scrub })
  const stops: Array<() => Promise<void>> = []
  let fastifyPlugin: FastifyPluginCallback | undefined
  if (settings.traces) {
    const sdk = await import('@opentelemetry/sdk-trace')
    const { OTLPTraceExporter } =
      settings.protocol === 'http/json'
        ? await import('@opentelemetry/exporter-trace-otlp-http')
        : await import('@opentelemetry/exporter-trace-otlp-proto')
    const ratio = new sdk.TraceIdRatioBasedSampler(settings.sampler.ratio)
    const root = {
      always_on: new sdk.AlwaysOnSampler(),
      always_off: new sdk.AlwaysOffSampler(),
      traceidratio: ratio,
      parentbased_always_on: new sdk.ParentBasedSampler({ root: new sdk.AlwaysOnSampler() }),
      parentbased_always_off: new sdk.ParentBasedSampler({ root: new sdk.AlwaysOffSampler() }),
      parentbased_traceidratio: new sdk.ParentBasedSampler({ root: ratio }),
    }[settings.sampler.name]
    const batch = new sdk.BatchSpanProcessor({ exporter: new OTLPTraceExporter(), ...settings.batch })
    const provider = new sdk.TracerProvider({
      resource,
      ...(root && { sampler: root }),
      spanProcessors: [scrubbing(batch, options.scrub)],
    })
    api.trace.setGlobalTracerProvider(provider)
    const { FastifyOtelInstrumentation } = await import('@fastify/otel')
    const instrumentation = new FastifyOtelInstrumentation({
      instrumentHooks: false,
      instrumentHandler: false,
      requestHook: (span, request) => {
        // Named for its route (`GET /api/runs/:id`), its path without a query (tickets ride in it).
        const route = request.routeOptions.url ?? request.url.split('?')[0]
        span.updateName(`${request.method} ${route}`)
        span.setAttribute('url.path', request.url.split('?')[0] ?? '')
      },
    })
    instrumentation.setTracerProvider(provider)
    fastifyPlugin = instrumentation.plugin() as unknown as FastifyPluginCallback
    stops.push(() => provider.shutdown())
  }
  if (settings.metrics) {
    const sdk = await import('@opentelemetry/sdk-metrics')
    const { OTLPMetricExporter } =
      settings.metricsProtocol === 'http/json'
        ? await import('@opentelemetry/exporter-metrics-otlp-http')
        : await import('@opentelemetry/exporter-metrics-otlp-proto')
    const provider = new sdk.MeterProvider({
      resource,
      readers: [
        new sdk.PeriodicExportingMetricReader({
          exporter: new OTLPMetricExporter(),
          exportIntervalMillis: Math.max(100, settings.metricIntervalMs),
          exportTimeoutMillis: Math.min(30_000, Math.max(100, settings.metricIntervalMs)),
        }),
      ],
    })
    metrics.setGlobalMeterProvider(provider)
    resetGenAiMetrics()
    stops.push(() => provider.shutdown())
  }
  return {
    ...(fastifyPlugin && { fastifyPlugin }),
    shutdown: async () => {
      // What is queued is sent (bounded by the exporters' own timeouts); a collector that is down does not hold up the stop.
      await Promise.allSettled(stops.map((stop) => stop()))
      trace.disable()
      metrics.disable()
      propagation.disable()
      context.disable()
      diag.disable()
      configureContent({ capture: false })
      resetGenAiMetrics()
    },
  }
}

/** Every string attribute, status and event of an ended span scrubbed of secrets before it is queued. */
function scrubbing(inner: SpanProcessor, scrub: (text: string) => string): SpanProcessor {
  const clean = (attributes: Attributes) => {
    for (const [key, value] of Object.entries(attributes)) if (typeof value === 'string') attributes[key] = scrub(value)
  }
  return {
    onStart: (span, parent: Context) => inner.onStart(span, parent),
    onEnd: (span: ReadableSpan) => {
      clean(span.attributes as Attributes)
      for (const event of span.events) if (event.attributes) clean(event.attributes as Attributes)
      if (span.status.message) (span.status as { message?: string }).message = scrub(span.status.message)
      inner.onEnd(span)
    },
    forceFlush: () => inner.forceFlush(),
    shutdown: () => inner.shutdown(),
  }
}
