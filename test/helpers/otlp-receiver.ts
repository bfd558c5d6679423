import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'

/** One span as OTLP/HTTP JSON carries it, its attributes flattened to plain values. */
export interface ReceivedSpan {
  traceId: string
  spanId: string
  parentSpanId: string
  name: string
  kind: number
  attributes: Record<string, unknown>
  status: { code?: number; message?: string }
  resource: Record<string, unknown>
}

export interface OtlpReceiver {
  /** `http://127.0.0.1:<port>`: the `OTEL_EXPORTER_OTLP_ENDPOINT`. */
  url: string
  spans: ReceivedSpan[]
  /** Metric names received, with their data points' attributes. */
  metrics: Array<{ name: string; points: Array<Record<string, unknown>> }>
  /** Every request body as received (to look for what must not be there). */
  raw: string[]
  headers: IncomingHttpHeaders[]
  close(): Promise<void>
}

type AnyValue = {
  stringValue?: string
  intValue?: number | string
  doubleValue?: number
  boolValue?: boolean
  arrayValue?: { values?: AnyValue[] }
}
type KeyValue = { key: string; value: AnyValue }

function plain(value: AnyValue): unknown {
  if (value.stringValue !== undefined) return value.stringValue
  if (value.intValue !== undefined) return Number(value.intValue)
  if (value.doubleValue !== undefined) return value.doubleValue
  if (value.boolValue !== undefined) return value.boolValue
  if (value.arrayValue) return (value.arrayValue.values ?? []).map(plain)
  return undefined
}

function flatten(attributes: KeyValue[] | undefined): Record<string, unknown> {
  return Object.fromEntries((attributes ?? []).map((attribute) => [attribute.key, plain(attribute.value)]))
}

/** A local OTLP/HTTP receiver (JSON encoding) for `/v1/traces` and `/v1/metrics`. */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = []
  const metrics: OtlpReceiver['metrics'] = []
  const raw: string[] = []
  const headers: IncomingHttpHeaders[] = []
  const server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8')
      raw.push(text)
      headers.push(request.headers)
      try {
        const body = JSON.parse(text) as {
          resourceSpans?: Array<{
            resource?: { attributes?: KeyValue[] }
            scopeSpans?: Array<{
              spans?: Array<Omit<ReceivedSpan, 'attributes' | 'resource'> & { attributes?: KeyValue[] }>
            }>
          }>
          resourceMetrics?: Array<{
            scopeMetrics?: Array<{
              metrics?: Array<{
                name: string
                histogram?: { dataPoints?: Array<{ attributes?: KeyValue[] }> }
                sum?: { dataPoints?: Array<{ attributes?: KeyValue[] }> }
              }>
            }>
          }>
        }
        for (const resourceSpans of body.resourceSpans ?? []) {
          const resource = flatten(resourceSpans.resource?.attributes)
          for (const scope of resourceSpans.scopeSpans ?? [])
            for (const span of scope.spans ?? [])
              spans.push({
                ...span,
                parentSpanId: span.parentSpanId ?? '',
                attributes: flatten(span.attributes),
                status: span.status ?? {},
                resource,
              })
        }
        for (const resourceMetrics of body.resourceMetrics ?? [])
          for (const scope of resourceMetrics.scopeMetrics ?? [])
            for (const metric of scope.metrics ?? [])
              metrics.push({
                name: metric.name,
                points: (metric.histogram?.dataPoints ?? metric.sum?.dataPoints ?? []).map((point) =>
                  flatten(point.attributes),
                ),
              })
      } catch {
        // Not JSON: kept raw only.
      }
      response.writeHead(200, { 'content-type': 'application/json' })
      response.end('{}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    metrics,
    raw,
    headers,
    async close() {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
