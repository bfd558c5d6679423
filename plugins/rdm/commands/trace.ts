import { createHash } from 'node:crypto'
import type { JsonValue, Registry } from '../../../src/extension/index.js'

interface TraceParams {
  traceId: string
}

const SERVICES = ['gateway', 'auth', 'orders', 'inventory', 'payments', 'search', 'db'] as const
const OPERATIONS = [
  'GET /api',
  'verify token',
  'load order',
  'reserve stock',
  'charge card',
  'query index',
  'SELECT',
] as const

/**
 * A fake trace derived from the id alone (sha256 bytes drive every choice), so the same id always
 * gives the same answer. A real plugin would call its tracing backend here.
 */
export function fakeTrace(traceId: string): { traceId: string; spans: JsonValue[] } {
  const bytes = createHash('sha256').update(traceId).digest()
  const byte = (index: number): number => bytes[index % bytes.length] ?? 0
  const count = 2 + (byte(0) % 5)
  const spans: JsonValue[] = []
  let start = 0
  for (let index = 0; index < count; index++) {
    const pick = byte(index + 1) % SERVICES.length
    const durationMs = 1 + ((byte(index + 8) * 7 + byte(index + 16)) % 400)
    spans.push({
      spanId: bytes
        .subarray(index * 2, index * 2 + 4)
        .toString('hex')
        .padEnd(8, '0'),
      parentSpanId: index === 0 ? null : bytes.subarray(0, 4).toString('hex'),
      service: SERVICES[pick] ?? 'unknown',
      operation: OPERATIONS[pick] ?? 'unknown',
      startMs: start,
      durationMs,
      status: byte(index + 24) % 17 === 0 ? 'error' : 'ok',
    })
    start += 1 + (byte(index + 4) % 20)
  }
  return { traceId, spans }
}

/** `rdm.trace`: looks up a trace by id (read-only). */
export function registerTrace(registry: Registry): void {
  registry.addCommand<TraceParams>(
    {
      id: 'rdm.trace',
      title: 'Show trace',
      description:
        'Returns the spans of a distributed trace by its id (service, operation, start and duration in ms, status).',
      paramsSchema: {
        type: 'object',
        properties: {
          traceId: {
            type: 'string',
            pattern: '^[A-Za-z0-9_-]{1,64}$',
            description: 'Trace id: letters, digits, _ or -, at most 64',
          },
        },
        required: ['traceId'],
        additionalProperties: false,
      },
      risk: 'low',
      exposeAsTool: {},
      idempotent: true,
    },
    (params) => fakeTrace(params.traceId),
  )
}
