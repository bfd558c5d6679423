import { createHash, timingSafeEqual } from 'node:crypto'
import { Type } from 'typebox'
import type { Registry } from 'prom-client'
import { bearerToken } from '../auth.js'
import { HttpProblem } from '../problem.js'
import { refuseIfBlocked } from '../request-guards.js'
import type { App, ServerDeps } from '../server-deps.js'

const Status = Type.Object({ status: Type.String() })

/** Who may read `/metrics`: the bearer of `token`, or anyone when the server is reachable only from this machine. */
export interface MetricsAccess {
  token: string | undefined
  openWithoutToken: boolean
}

export function registerHealthRoutes(app: App, deps: ServerDeps, metrics: Registry, access: MetricsAccess): void {
  const expected = access.token ? createHash('sha256').update(access.token).digest() : null
  const config = { rateLimit: false } as const
  app.get(
    '/healthz',
    {
      config,
      schema: {
        operationId: 'getHealth',
        tags: ['operations'],
        summary: 'Liveness',
        security: [],
        response: { 200: Status },
      },
    },
    async () => ({
      status: 'ok',
    }),
  )
  app.get(
    '/readyz',
    {
      config,
      schema: {
        operationId: 'getReadiness',
        tags: ['operations'],
        summary:
          'Readiness: the database answers and migrations are applied; which exec backend runs and whether the sandbox works (details: GET /api/admin/settings)',
        security: [],
        response: {
          200: Type.Object({
            status: Type.String(),
            exec: Type.Object({ backend: Type.String(), sandboxReady: Type.Boolean(), cgroups: Type.String() }),
            warnings: Type.Array(Type.String()),
          }),
          503: Type.Ref('Problem'),
        },
      },
    },
    async () => {
      try {
        await deps.store.ping()
      } catch {
        throw new HttpProblem('service_unavailable', 'database is not reachable')
      }
      const probe = deps.exec.probe
      // Mounted MCP servers start when first needed: this is one of those needs.
      await deps.bus.catalog.settled()
      const warnings = [
        ...deps.startWarnings,
        ...(deps.liveWarnings?.() ?? []),
        ...(deps.exec.backendName === 'sandbox' && !probe.ok
          ? [`exec tools are off: the sandbox cannot work here (${probe.reason ?? 'the probe failed'})`]
          : []),
      ]
      return {
        status: 'ready',
        exec: { backend: deps.exec.backendName, sandboxReady: probe.ok, cgroups: probe.cgroups },
        warnings,
      }
    },
  )
  app.get(
    '/metrics',
    {
      schema: {
        operationId: 'getMetrics',
        tags: ['operations'],
        summary: 'Prometheus metrics (bearer PLINTH_METRICS_TOKEN; open without one only when listening on loopback)',
        response: {
          200: Type.Unsafe({
            description: 'Prometheus text exposition format',
            content: { 'text/plain': { schema: Type.String() } },
          }),
          401: Type.Ref('Problem'),
          404: Type.Ref('Problem'),
          429: Type.Ref('Problem'),
        },
      },
    },
    async (request, reply) => {
      if (expected) {
        const given = createHash('sha256')
          .update(bearerToken(request) ?? '')
          .digest()
        if (!timingSafeEqual(given, expected)) {
          refuseIfBlocked(request, reply)
          throw new HttpProblem('unauthorized', 'metrics token required')
        }
      } else if (!access.openWithoutToken) {
        throw new HttpProblem(
          'not_found',
          '/metrics is disabled: the server listens beyond loopback; set PLINTH_METRICS_TOKEN to enable it',
        )
      }
      reply.type(metrics.contentType)
      return metrics.metrics()
    },
  )
}
