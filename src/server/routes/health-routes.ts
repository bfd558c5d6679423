import { Type } from 'typebox'
import type { Registry } from 'prom-client'
import { HttpProblem } from '../problem.js'
import type { App, ServerDeps } from '../server-deps.js'

const Status = Type.Object({ status: Type.String() })

export function registerHealthRoutes(app: App, deps: ServerDeps, metrics: Registry): void {
  const config = { rateLimit: false } as const
  app.get('/healthz', { config, schema: { tags: ['operations'], summary: 'Liveness', security: [], response: { 200: Status } } }, async () => ({
    status: 'ok',
  }))
  app.get(
    '/readyz',
    {
      config,
      schema: {
        tags: ['operations'],
        summary: 'Readiness: the database answers and migrations are applied',
        security: [],
        response: { 200: Status, 503: Type.Ref('Problem') },
      },
    },
    async () => {
      try {
        await deps.store.ping()
      } catch {
        throw new HttpProblem('service_unavailable', 'database is not reachable')
      }
      return { status: 'ready' }
    },
  )
  app.get(
    '/metrics',
    { config, schema: { tags: ['operations'], summary: 'Prometheus metrics', security: [], hide: false } },
    async (_request, reply) => {
      reply.type(metrics.contentType)
      return metrics.metrics()
    },
  )
}
