import {
  context,
  propagation,
  trace,
  SpanKind,
  SpanStatusCode,
  type Attributes,
  type Span,
  type SpanOptions,
} from '@opentelemetry/api'

// A proxy: spans go nowhere (and cost next to nothing) until startOtel registers a provider.
const tracer = trace.getTracer('plinth')

/** What a span holds of prompts and completions: nothing, unless the operator opted in (docs/guides/operating.md#tracing). */
let captureContent = false
let scrub: (text: string) => string = (text) => text

/** Set by startOtel: whether content is recorded, and how it is scrubbed first (like log lines). */
export function configureContent(options: { capture: boolean; scrub?: (text: string) => string }): void {
  captureContent = options.capture
  if (options.scrub) scrub = options.scrub
}

/**
 * Runs `fn` inside a new span (a child of the active one) and ends it: an error thrown marks it
 * failed with the error's type. With tracing off the span is a no-op.
 */
export function inSpan<T>(
  name: string,
  attributes: Attributes,
  fn: (span: Span) => Promise<T>,
  options: Pick<SpanOptions, 'kind' | 'root'> = {},
): Promise<T> {
  const span = tracer.startSpan(name, { kind: options.kind ?? SpanKind.INTERNAL, attributes, root: options.root })
  return context.with(trace.setSpan(context.active(), span), async () => {
    try {
      return await fn(span)
    } catch (error) {
      failSpan(span, error)
      throw error
    } finally {
      span.end()
    }
  })
}

/** Marks a span failed: its status carries the error's message (scrubbed), `error.type` its code or name. */
export function failSpan(span: Span, error: unknown, type?: string): void {
  if (!span.isRecording()) return
  const code =
    type ??
    (error && typeof error === 'object' && 'code' in error && typeof error.code === 'string'
      ? error.code
      : error instanceof Error
        ? error.name
        : 'error')
  span.setAttribute('error.type', code)
  span.setStatus({ code: SpanStatusCode.ERROR, message: scrub(error instanceof Error ? error.message : String(error)) })
}

/** Adds the active trace's W3C `traceparent` (and `tracestate`) to outgoing request headers. */
export function withTraceHeaders<T extends Record<string, string>>(headers: T): T {
  propagation.inject(context.active(), headers)
  return headers
}

/** Records content (a prompt, a completion, tool arguments) only when the operator opted in, scrubbed. */
export function setContent(span: Span, key: string, value: () => unknown): void {
  if (!captureContent || !span.isRecording()) return
  const content = value()
  span.setAttribute(key, scrub(typeof content === 'string' ? content : JSON.stringify(content)))
}

/** Adds attributes to the active span (the run's `invoke_agent`, say) once they are known. */
export function annotateSpan(attributes: Attributes): void {
  const span = trace.getActiveSpan()
  if (span?.isRecording()) span.setAttributes(attributes)
}

/** A span the caller ends itself, and a way to run work inside it (its children, its outgoing `traceparent`). */
export function openSpan(
  name: string,
  attributes: Attributes,
  kind: SpanKind = SpanKind.INTERNAL,
): { span: Span; within<T>(fn: () => Promise<T>): Promise<T> } {
  const span = tracer.startSpan(name, { kind, attributes })
  const active = trace.setSpan(context.active(), span)
  return { span, within: (fn) => context.with(active, fn) }
}

/** The `traceparent` of `span` (or the active one) set on a Headers object. */
export function injectTraceHeaders(headers: Headers, span?: Span): Headers {
  const active = span ? trace.setSpan(context.active(), span) : context.active()
  propagation.inject(active, headers, { set: (carrier, key, value) => carrier.set(key, value) })
  return headers
}

/** The `traceparent` of a span the caller holds, as headers for a request it makes outside `within`. */
export function traceHeadersOf(span: Span): Record<string, string> {
  const headers: Record<string, string> = {}
  propagation.inject(trace.setSpan(context.active(), span), headers)
  return headers
}

/** The active span's W3C `traceparent`, when tracing is on and a span is active. */
export function activeTraceParent(): string | undefined {
  const headers: Record<string, string> = {}
  propagation.inject(context.active(), headers)
  return headers.traceparent
}

/** Runs `fn` with the trace a stored `traceparent` names as its parent (as if the request carried it). */
export function withinTraceParent<T>(traceParent: string | null | undefined, fn: () => T): T {
  if (!traceParent) return fn()
  return context.with(propagation.extract(context.active(), { traceparent: traceParent }), fn)
}
