import { createHash, randomUUID } from 'node:crypto'
import { setMaxListeners } from 'node:events'
import Fastify, { type FastifyBaseLogger } from 'fastify'
import fastifyRateLimit from '@fastify/rate-limit'
import { fastifySSE } from '@fastify/sse'
import fastifySwagger from '@fastify/swagger'
import fastifySwaggerUi from '@fastify/swagger-ui'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { Ajv } from 'ajv'
import addFormatsModule from 'ajv-formats'
import type { Registry } from 'prom-client'
import type { CommandBus, ProjectAccess } from '../cmdbus/index.js'
import type { RunManager } from '../runmgr/index.js'
import type { Store } from '../store/index.js'
import { bearerToken, createAdminAuth, createUserAuth } from './auth.js'
import { handleError } from './error-handler.js'
import { registerMetrics } from './metrics.js'
import { HttpProblem, problemBody } from './problem.js'
import { registerAdminRoutes } from './routes/admin-routes.js'
import { registerAuditRoutes } from './routes/audit-routes.js'
import { registerRunRoutes } from './routes/run-routes.js'
import { registerCommandRoutes } from './routes/command-routes.js'
import { registerDecisionRoutes } from './routes/decision-routes.js'
import { registerConversationRoutes } from './routes/conversation-routes.js'
import { registerHealthRoutes } from './routes/health-routes.js'
import { registerMeRoutes } from './routes/me-routes.js'
import { registerProjectRoutes } from './routes/project-routes.js'
import { Problem } from './schemas.js'
import type { App, ServerDeps } from './server-deps.js'

export interface ServerOptions {
  store: Store
  bus: CommandBus
  access: ProjectAccess
  runs: RunManager
  logger: FastifyBaseLogger
  /** Largest accepted request body, bytes. */
  bodyLimit: number
  rateLimit: { max: number; windowMs: number }
  sseHeartbeatMs: number
  fullModeTtlMs: number
  /** Enables `/api/admin` when set. */
  adminToken?: string
  version: string
  /** The registry `/metrics` serves (shared with the run manager's metrics). */
  metrics?: Registry
}

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv

/** Builds the HTTP app (not yet listening). Close it to end streams and stop accepting. */
export async function buildServer(options: ServerOptions): Promise<App> {
  const app = Fastify({
    loggerInstance: options.logger,
    bodyLimit: options.bodyLimit,
    genReqId: () => randomUUID(),
    requestIdHeader: 'x-request-id',
    return503OnClosing: true,
    routerOptions: { ignoreTrailingSlash: true },
  }).withTypeProvider<TypeBoxTypeProvider>()

  // Bodies are validated strictly (no coercion, unknown fields rejected); path and query strings
  // are text, so they are coerced to the declared types.
  const bodyAjv = addFormats(new Ajv({ allErrors: true, strict: false, coerceTypes: false, removeAdditional: false, useDefaults: true }))
  const textAjv = addFormats(new Ajv({ allErrors: true, strict: false, coerceTypes: 'array', removeAdditional: false, useDefaults: true }))
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? bodyAjv : textAjv).compile(schema))

  const shutdown = new AbortController()
  // Every open stream listens for shutdown; thousands of them are expected, not a leak.
  setMaxListeners(0, shutdown.signal)
  const deps: ServerDeps = { store: options.store, bus: options.bus, access: options.access, runs: options.runs, fullModeTtlMs: options.fullModeTtlMs, shutdown: shutdown.signal }
  app.addHook('preClose', async () => shutdown.abort())
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id)
  })

  app.addSchema(Problem)
  app.setErrorHandler(handleError)
  app.setNotFoundHandler((request, reply) => {
    reply.code(404).type('application/problem+json').send(problemBody('not_found', `no route ${request.method} ${request.url.split('?')[0]}`))
  })

  await app.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Plinth', description: 'Headless HTTP + SSE agent server with a plugin command bus', version: options.version },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, index) => (typeof json.$id === 'string' ? json.$id : `def-${index}`) },
  })
  await app.register(fastifySwaggerUi, { routePrefix: '/docs' })
  await app.register(fastifySSE, { heartbeatInterval: options.sseHeartbeatMs })
  await app.register(fastifyRateLimit, {
    global: true,
    max: options.rateLimit.max,
    timeWindow: options.rateLimit.windowMs,
    // Per token when there is one (hashed: the key is kept in memory), else per address.
    keyGenerator: (request) => {
      const token = bearerToken(request)
      return token ? `token:${createHash('sha256').update(token).digest('hex').slice(0, 32)}` : `ip:${request.ip}`
    },
    errorResponseBuilder: (_request, context) =>
      new HttpProblem('rate_limited', `rate limit of ${context.max} requests per ${context.after} exceeded; retry later`),
  })

  const metrics = registerMetrics(app, options.metrics)
  registerHealthRoutes(app, deps, metrics)

  const userAuth = createUserAuth(options.store)
  await app.register(
    async (api) => {
      api.decorateRequest('user', null)
      api.addHook('onRequest', userAuth)
      // A POST or PATCH without a body means "no fields", not "wrong type".
      api.addHook('preValidation', async (request) => {
        if (request.body === undefined && (request.method === 'POST' || request.method === 'PATCH')) request.body = {}
      })
      registerMeRoutes(api)
      registerProjectRoutes(api, deps)
      registerConversationRoutes(api, deps)
      registerCommandRoutes(api, deps)
      registerDecisionRoutes(api, deps)
      registerAuditRoutes(api, deps)
      registerRunRoutes(api, deps)
    },
    { prefix: '/api' },
  )

  await app.register(
    async (admin) => {
      if (!options.adminToken) {
        admin.addHook('onRequest', async () => {
          throw new HttpProblem('not_found', 'the admin API is disabled; set PLINTH_ADMIN_TOKEN to enable it')
        })
      } else {
        admin.addHook('onRequest', createAdminAuth(options.adminToken))
      }
      admin.addHook('preValidation', async (request) => {
        if (request.body === undefined && (request.method === 'POST' || request.method === 'PATCH')) request.body = {}
      })
      registerAdminRoutes(admin, deps)
    },
    { prefix: '/api/admin' },
  )

  return app
}
