import type { FastifyInstance } from 'fastify'
import { collectDefaultMetrics, Histogram, Registry } from 'prom-client'

/** Prometheus metrics on a registry of this server's own (several servers may share a process). */
export function registerMetrics(app: FastifyInstance, registry: Registry = new Registry()): Registry {
  collectDefaultMetrics({ register: registry, prefix: 'plinth_' })
  const requests = new Histogram({
    name: 'plinth_http_request_duration_seconds',
    help: 'HTTP request latency by route and status',
    labelNames: ['method', 'route', 'status_code'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  })
  app.addHook('onResponse', async (request, reply) => {
    requests.observe(
      { method: request.method, route: request.routeOptions.url ?? 'unmatched', status_code: String(reply.statusCode) },
      reply.elapsedTime / 1000,
    )
  })
  return registry
}
