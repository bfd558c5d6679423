import { UploadSlots, type UploadLimits } from './upload-slots.js'
import { refuseOversizeBeforeContinue } from './oversize-bodies.js'
import { createHash } from 'node:crypto'
import { setMaxListeners } from 'node:events'
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyPluginCallback,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify'
import fastifyCors from '@fastify/cors'
import fastifyMultipart from '@fastify/multipart'
import fastifyRateLimit from '@fastify/rate-limit'
import { fastifySSE } from '@fastify/sse'
import fastifySwagger from '@fastify/swagger'
import fastifySwaggerUi from '@fastify/swagger-ui'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { Ajv } from 'ajv'
import addFormatsModule from 'ajv-formats'
import type { Registry } from 'prom-client'
import { IsOptional, type TSchema } from 'typebox'
import { createPluginLogger, type CommandBus, type ProjectAccess } from '../cmdbus/index.js'
import type { ExecService } from '../exec/index.js'
import { KnowledgeService, type Ingestor, type Retriever } from '../rag/index.js'
import { ConversationService, ProjectService, RunQueries, type RunManager } from '../runmgr/index.js'
import { ScheduleFirer, ScheduleService } from '../schedules/index.js'
import { Accounts, activeRunIds, type Store } from '../store/index.js'
import { defaultWebhookSettings, WebhookService, type WebhookSettings } from '../webhooks/index.js'
import { bearerToken, createAdminAuth, createUserAuth } from './auth.js'
import { lazySerializerFactory, lazyValidator } from './lazy-compilers.js'
import { TokenCache } from './token-cache.js'
import { registerStreamTicketRoutes } from './routes/stream-ticket-routes.js'
import { AllowedMethods } from './allowed-methods.js'
import { handleError, requestPath } from './error-handler.js'
import { guardHostileInput } from './hostile-input.js'
import { registerConsole } from './console-route.js'
import { registerMetrics } from './metrics.js'
import { hoistTitledSchemas } from './openapi-components.js'
import { HttpProblem, problemBody } from './problem.js'
import {
  defaultOverloadSettings,
  OverloadGuard,
  registerOverloadMetrics,
  runStartingRoutes,
  type OverloadSettings,
} from './overload.js'
import { registerAdminRoutes } from './routes/admin-routes.js'
import { registerAuditRoutes } from './routes/audit-routes.js'
import { registerAdminUsageRoutes, registerUsageRoutes } from './routes/usage-routes.js'
import { registerRunRoutes } from './routes/run-routes.js'
import { registerUiStreamRoutes } from './routes/ui-stream-routes.js'
import { registerAgUiRoutes } from './routes/ag-ui-routes.js'
import { AgUiEventSchema } from './ag-ui/event-schema.js'
import { registerCommandRoutes } from './routes/command-routes.js'
import { registerDecisionRoutes } from './routes/decision-routes.js'
import { registerConversationRoutes } from './routes/conversation-routes.js'
import { registerHealthRoutes } from './routes/health-routes.js'
import { registerFileRoutes } from './routes/file-routes.js'
import { registerKnowledgeRoutes } from './routes/knowledge-routes.js'
import { registerMemoryRoutes } from './routes/memory-routes.js'
import { registerCompactionRoutes } from './routes/compaction-routes.js'
import { registerMeRoutes } from './routes/me-routes.js'
import { registerProjectRoutes } from './routes/project-routes.js'
import { registerWebhookRoutes } from './routes/webhook-routes.js'
import { registerScheduleRoutes } from './routes/schedule-routes.js'
import { registerMcpRoutes } from './routes/mcp-routes.js'
import { registerMcpCallbackRoute, registerMcpConnectionRoutes } from './routes/mcp-connection-routes.js'
import {
  answerUnservedRequests,
  clientErrorHandler,
  frameworkErrors,
  limitByAddress,
  limitConnections,
  refuseIfBlocked,
  refuseQueryString,
  requestId,
} from './request-guards.js'
import { RunStreamEvent, StreamEvent } from './event-schemas.js'
import { Problem, Run } from './schemas.js'
import type { App, ServerDeps } from './server-deps.js'
import { defaultStreamLimits, StreamRegistry, type StreamLimits } from './stream-registry.js'

export interface ServerOptions {
  store: Store
  bus: CommandBus
  access: ProjectAccess
  runs: RunManager
  retriever: Retriever
  ingestor: Ingestor
  exec: ExecService
  /** What went wrong at start but did not stop it (a refused plugin, a model without its key): on /readyz. */
  startWarnings?: string[]
  /** Problems that come and go (an MCP server that is down): on /readyz while they last. */
  liveWarnings?: () => string[]
  /** Mounted MCP servers: per-user OAuth connections (routes under /api/mcp/connections). */
  mcp?: ServerDeps['mcp']
  /** Largest knowledge upload, bytes (default 20 MiB; over it: 413). */
  maxKnowledgeFileBytes?: number
  /** Uploads in flight per user and in all (default 2 and 8). */
  uploads?: UploadLimits
  /** When new runs are refused as overload (docs/guides/scaling.md#overload); default: a 2 s late event loop or a 1 s database wait. */
  overload?: Partial<OverloadSettings>
  /** Bytes of knowledge one user may hold (default 1 GiB). */
  maxKnowledgeBytesPerUser?: number
  logger: FastifyBaseLogger
  /** Largest accepted request body, bytes. */
  bodyLimit: number
  /**
   * Requests per token per window (`max`), and before authentication per client address
   * (`addressMax`) with a stricter budget for failed authentications (`authFailureMax`).
   */
  rateLimit: {
    max: number
    windowMs: number
    addressMax?: number
    authFailureMax?: number
    authFailureWindowMs?: number
  }
  /** Whole request (headers and body) must arrive within this long (default 30 s). */
  requestTimeoutMs?: number
  /** A connection idle this long is closed (default 120 s; SSE heartbeats keep streams busy). */
  connectionTimeoutMs?: number
  /** Open connections per client address (default 256) and in total (default 10,000). */
  maxConnectionsPerAddress?: number
  maxConnections?: number
  /** Addresses of reverse proxies whose X-Forwarded-For is believed (Fastify's trustProxy). */
  trustProxy?: boolean | string
  /** The address the server will listen on: `/metrics` is open without a token only on loopback. */
  host?: string
  /** Bearer token for `/metrics` (PLINTH_METRICS_TOKEN). */
  metricsToken?: string
  /** Origins browsers may call from (PLINTH_CORS_ORIGINS); none: CORS off. */
  corsOrigins?: string[]
  sseHeartbeatMs: number
  /** Caps, lifetime and buffering of event streams (defaults: defaultStreamLimits). */
  streams?: Partial<StreamLimits>
  fullModeTtlMs: number
  /** The currency of every cost (`currency`, default USD). */
  currency?: string
  /** Enables `/api/admin` when set. */
  adminToken?: string
  /** The server's secretKey: checks the signed checkpoints audit retention leaves (`GET /api/admin/audit/verify`). */
  auditKey?: string
  version: string
  /** The registry `/metrics` serves (shared with the run manager's metrics). */
  metrics?: Registry
  /** Authorization servers the MCP endpoint's protected resource metadata names (default none: Plinth's own tokens). */
  mcpAuthorizationServers?: string[]
  /** Webhooks: which URLs are accepted, the rotation grace; `wake` tells this instance's deliverer a message is due. */
  webhooks?: Partial<Pick<WebhookSettings, 'allowPrivate' | 'secretGraceMs'>> & { wake?: () => void }
  /** The schedule firer's timing (docs/guides/schedules.md); `enabled: false` leaves firing to other instances. */
  schedules?: { enabled?: boolean; tickMs?: number; graceMs?: number; pendingLeaseMs?: number }
  /** OpenTelemetry's server instrumentation, when tracing is on: registered before everything else. */
  httpTracing?: FastifyPluginCallback
}

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv

/**
 * ajv-formats' formats, with `date-time` held to the years 1000–9999: the embedded database cannot
 * store year 0 and reads years before 100 back as 19xx, so such a time is refused (400) rather than
 * failing (500) or silently changed.
 */
function withFormats(ajv: Ajv): Ajv {
  addFormats(ajv)
  const dateTime = ajv.formats['date-time'] as { validate: (text: string) => boolean }
  return ajv.addFormat('date-time', {
    type: 'string',
    validate: (text: string) => dateTime.validate(text) && /^[1-9]\d{3}-/.test(text),
  })
}

/** Builds the HTTP app (not yet listening). Close it to end streams and stop accepting. */
export async function buildServer(options: ServerOptions): Promise<App> {
  const requestTimeout = options.requestTimeoutMs ?? 30_000
  const app = Fastify({
    loggerInstance: options.logger,
    bodyLimit: options.bodyLimit,
    genReqId: requestId,
    requestIdHeader: false,
    return503OnClosing: true,
    // One line per request instead of two (below), and none at info for probes.
    logController: new LogController({ disableRequestLogging: true }),
    routerOptions: { ignoreTrailingSlash: true },
    requestTimeout,
    connectionTimeout: options.connectionTimeoutMs ?? 120_000,
    // Node only enforces a request timeout given at construction (the property Fastify sets later does
    // not reach a request whose body is still arriving); it checks on this interval (30 s by default).
    http: {
      // 64 KiB (Node's default is 16): a search query of 10 KB of CJK is 30 KB once percent-encoded.
      maxHeaderSize: 64 * 1024,
      requestTimeout,
      headersTimeout: Math.min(requestTimeout, 60_000),
      connectionsCheckingInterval: Math.max(100, Math.min(5000, Math.floor(requestTimeout / 2))),
    },
    clientErrorHandler,
    frameworkErrors,
    schemaController: { compilersFactory: { buildSerializer: lazySerializerFactory() } },
    ...(options.trustProxy !== undefined && { trustProxy: options.trustProxy }),
  }).withTypeProvider<TypeBoxTypeProvider>()
  limitConnections(app.server, options.maxConnectionsPerAddress ?? 256, options.maxConnections ?? 10_000)
  answerUnservedRequests(app.server)
  // Every route from here on, for telling 405 from 404 and for each route's own body limit.
  const routeMethods = new AllowedMethods()
  app.addHook('onRoute', (route) => {
    routeMethods.add(route.method, route.url, route.bodyLimit)
    // An API route that takes no query string refuses one, like the fields a route does not know.
    if (route.url.startsWith('/api/') && route.schema?.querystring === undefined)
      route.preValidation = [refuseQueryString, ...[route.preValidation ?? []].flat()]
  })
  refuseOversizeBeforeContinue(app.server, options.bodyLimit, (method, path) => routeMethods.bodyLimit(method, path))

  // Bodies are validated strictly (no coercion, unknown fields rejected); path and query strings
  // are text, so they are coerced to the declared types.
  const bodyAjv = withFormats(
    new Ajv({ allErrors: true, strict: false, coerceTypes: false, removeAdditional: false, useDefaults: true }),
  )
  const textAjv = withFormats(
    new Ajv({ allErrors: true, strict: false, coerceTypes: 'array', removeAdditional: false, useDefaults: true }),
  )
  app.setValidatorCompiler(({ schema, httpPart }) => lazyValidator(httpPart === 'body' ? bodyAjv : textAjv, schema))
  // A server span per request (continuing an incoming `traceparent`) that the run's spans descend from.
  if (options.httpTracing) await app.register(options.httpTracing)

  const shutdown = new AbortController()
  // Every open stream listens for shutdown; thousands of them are expected, not a leak.
  setMaxListeners(0, shutdown.signal)
  const streams = new StreamRegistry(
    options.store,
    { ...defaultStreamLimits, ...options.streams },
    options.logger,
    options.metrics,
  )
  streams.start()
  const projects = new ProjectService({
    store: options.store,
    access: options.access,
    models: options.runs.models,
    catalog: options.bus.catalog,
    runtimes: () => Object.keys(options.exec.settings.runtimes),
    runs: options.runs,
  })
  const conversations = new ConversationService(options.store, options.access, projects, {
    fullModeTtlMs: options.fullModeTtlMs,
    runs: options.runs,
  })
  // Every instance fires due schedules; the database decides which one fires each occurrence.
  const firer = new ScheduleFirer({
    store: options.store,
    bus: options.bus,
    runs: options.runs,
    projects,
    conversations,
    log: createPluginLogger(options.logger, 'schedules'),
    ...options.schedules,
  })
  if (options.schedules?.enabled !== false) firer.start()
  const deps: ServerDeps = {
    schedules: new ScheduleService({
      store: options.store,
      projects,
      conversations,
      models: options.runs.models,
      catalog: options.bus.catalog,
      firer,
    }),
    store: options.store,
    accounts: new Accounts(options.store),
    projects,
    conversations,
    runQueries: new RunQueries(options.store, projects, conversations),
    bus: options.bus,
    access: options.access,
    runs: options.runs,
    fullModeTtlMs: options.fullModeTtlMs,
    currency: options.currency ?? 'USD',
    ...(options.auditKey && { auditKey: options.auditKey }),
    shutdown: shutdown.signal,
    streams,
    retriever: options.retriever,
    ingestor: options.ingestor,
    knowledge: new KnowledgeService(options.store, projects),
    webhooks: new WebhookService(
      options.store,
      projects,
      { ...defaultWebhookSettings, ...options.webhooks },
      options.webhooks?.wake,
    ),
    exec: options.exec,
    maxKnowledgeFileBytes: options.maxKnowledgeFileBytes ?? 20 * 1024 * 1024,
    uploads: new UploadSlots(options.uploads),
    maxKnowledgeBytesPerUser: options.maxKnowledgeBytesPerUser ?? 1024 * 1024 * 1024,
    startWarnings: options.startWarnings ?? [],
    ...(options.liveWarnings && { liveWarnings: options.liveWarnings }),
    ...(options.mcp && { mcp: options.mcp }),
  }
  app.addHook('preClose', async () => {
    shutdown.abort()
    await firer.stop()
  })
  app.addHook('onClose', async () => streams.stop())
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id)
    // A route that takes no body, or an optional one (cancel, resume, publish…), called with
    // `Content-Type: application/json` and nothing after it — what many HTTP clients send — is not a
    // malformed JSON body.
    const body = request.routeOptions.schema?.body
    const length = request.headers['content-length']
    // No Content-Length and no Transfer-Encoding is no body too (curl -X POST without -d).
    const empty = length === '0' || (length === undefined && request.headers['transfer-encoding'] === undefined)
    if (
      empty &&
      (body === undefined || IsOptional(body as TSchema)) &&
      request.headers['content-type']?.startsWith('application/json')
    )
      delete request.headers['content-type']
  })
  const overload = new OverloadGuard({ ...defaultOverloadSettings, ...options.overload })
  // Measured from when the server is ready: opening the database and loading plugins block the loop.
  app.addHook('onReady', async () =>
    overload.start(
      () => options.store.ping(),
      () => options.runs.driveLoad,
    ),
  )
  app.addHook('onClose', async () => overload.stop())
  app.addHook('onResponse', async (request) => overload.admitEnded(request.id))
  app.addHook('onRequestAbort', async (request) => overload.admitEnded(request.id))
  app.addHook('onRequest', async (request, reply) => {
    if (request.method !== 'POST' || !runStartingRoutes.has(request.routeOptions.url ?? '')) return
    const conversation = (request.params as { id?: string } | undefined)?.id
    // At the cap, a conversation with an active run is told so (409), not refused as overload: one indexed read.
    const runThere =
      conversation !== undefined && overload.atCap && (await activeRunIds(options.store, [conversation])).size > 0
    const reason = overload.reasonToRefuse(conversation, runThere)
    if (!reason) {
      // Only a plain creation counts: one that waits for the run, or streams it, lasts as long as the run.
      const query = request.query as { wait?: unknown } | undefined
      const waits = query?.wait === 'true' || query?.wait === '1' || request.headers.prefer?.includes('wait') === true
      if (!waits && !request.headers.accept?.includes('text/event-stream'))
        overload.admitStarted(request.id, conversation)
      return
    }
    overload.refusedCount++
    reply.header('retry-after', overload.settings.retryAfterSeconds)
    throw new HttpProblem(
      'overloaded',
      `this instance is past its capacity (${reason}); no run was started — retry in ${overload.settings.retryAfterSeconds} s`,
    )
  })
  app.addHook('onResponse', async (request, reply) => {
    const probe = quietRoutes.has(request.routeOptions.url ?? '')
    const fields = { req: request, res: reply, responseTime: Math.round(reply.elapsedTime * 10) / 10 }
    if (probe) request.log.debug(fields, 'request completed')
    else request.log.info(fields, 'request completed')
  })

  // CORS only for listed origins (off by default). Bearer tokens, not cookies: no credentials mode.
  // Preflights are answered before authentication, and an unlisted origin gets no CORS headers.
  if (options.corsOrigins && options.corsOrigins.length > 0) {
    const listed = new Set(options.corsOrigins)
    await app.register(fastifyCors, {
      // A function, not the list: for an unlisted origin the plugin then sends no CORS header at all
      // (with a list it still answered preflights with the allowed methods and headers), and always Vary.
      origin: (origin, done) => done(null, origin !== undefined && listed.has(origin) ? origin : false),
      methods: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'],
      allowedHeaders: [
        'authorization',
        'content-type',
        'idempotency-key',
        'last-event-id',
        'prefer',
        'x-request-id',
        'mcp-protocol-version',
        'mcp-session-id',
      ],
      exposedHeaders: [
        'x-request-id',
        'retry-after',
        'idempotent-replayed',
        'preference-applied',
        'content-disposition',
        'x-ratelimit-limit',
        'x-ratelimit-remaining',
        'x-ratelimit-reset',
        'www-authenticate',
        'mcp-session-id',
      ],
      maxAge: 600,
      strictPreflight: false,
    })
  }
  // First: counted by address before anything else runs (authentication included).
  await app.register(fastifyRateLimit, {
    global: true,
    max: options.rateLimit.max,
    timeWindow: options.rateLimit.windowMs,
    // Per token when there is one (hashed: the key is kept in memory), else per address.
    keyGenerator: (request) => {
      const token = bearerToken(request)
      return token ? `token:${createHash('sha256').update(token).digest('hex').slice(0, 32)}` : `ip:${request.ip}`
    },
    // `context.after` is the time left until the window resets, not the window.
    errorResponseBuilder: (_request, context) =>
      new HttpProblem(
        'rate_limited',
        `rate limit of ${context.max} requests per ${windowText(options.rateLimit.windowMs)} exceeded; retry in ${context.after}`,
      ),
  })
  limitByAddress(app, {
    windowMs: options.rateLimit.windowMs,
    addressMax: options.rateLimit.addressMax ?? options.rateLimit.max * 4,
    authFailureMax: options.rateLimit.authFailureMax ?? 20,
    authFailureWindowMs: options.rateLimit.authFailureWindowMs ?? 60_000,
  })
  guardHostileInput(app)
  // Knowledge uploads; limits are set per request by the route.
  await app.register(fastifyMultipart, { throwFileSizeLimit: true })
  // Bodies are read as sent: a compressed one would be parsed as if plain (or refused as malformed JSON).
  app.addHook('onRequest', async (request, reply) => {
    const encoding = request.headers['content-encoding']?.trim().toLowerCase()
    if (encoding === undefined || encoding === '' || encoding === 'identity') return
    reply.header('accept-encoding', 'identity')
    throw new HttpProblem(
      'unsupported_media_type',
      `content-encoding ${encoding} is not accepted; send the body uncompressed`,
    )
  })
  // Only a route that reads a multipart body (`config.multipart`) takes one: elsewhere it would be read
  // as no body at all, and a form-encoded PATCH would answer 200 having changed nothing.
  app.addHook('preValidation', async (request) => {
    if (request.isMultipart() && request.routeOptions.config.multipart !== true)
      throw new HttpProblem(
        'unsupported_media_type',
        `content-type ${request.headers['content-type'] ?? '(none)'} is not accepted; send application/json`,
      )
  })

  app.addSchema(Problem)
  app.addSchema(Run)
  app.addSchema(RunStreamEvent)
  app.addSchema(StreamEvent)
  app.addSchema(AgUiEventSchema)
  app.setErrorHandler(handleError)
  app.setNotFoundHandler((request, reply) => {
    const path = requestPath(request)
    const allowed = routeMethods.at(path)
    if (allowed.length > 0)
      return reply
        .code(405)
        .header('allow', allowed.join(', '))
        .type('application/problem+json')
        .send(problemBody('method_not_allowed', `${path} answers ${allowed.join(', ')}`, { instance: path }))
    return reply
      .code(404)
      .type('application/problem+json')
      .send(problemBody('not_found', `no route ${request.method} ${path}`, { instance: path }))
  })

  await app.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Plinth',
        description: 'Headless HTTP + SSE agent server with a plugin command bus',
        version: options.version,
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, index) =>
        typeof json.$id === 'string' ? json.$id : `def-${index}`,
    },
    transformObject: (document) =>
      'openapiObject' in document ? hoistTitledSchemas(document.openapiObject) : document.swaggerObject,
  })
  // The API explorer is a page like any other: a strict CSP (its own script hashes), never framed,
  // no MIME sniffing, no referrer, no calls to the public validator.
  await app.register(fastifySwaggerUi, {
    routePrefix: '/docs',
    uiConfig: { validatorUrl: null },
    staticCSP: true,
    transformStaticCSP: (header: string) =>
      header
        .replace("frame-ancestors 'self'", "frame-ancestors 'none'")
        .replace(' validator.swagger.io', '')
        .replace(' upgrade-insecure-requests;', '')
        .replace('upgrade-insecure-requests;', ''),
  })
  app.addHook('onSend', async (request, reply) => {
    if (!request.url.startsWith('/docs')) return
    reply
      .header('x-content-type-options', 'nosniff')
      .header('x-frame-options', 'DENY')
      .header('referrer-policy', 'no-referrer')
    if (!reply.getHeader('content-security-policy'))
      reply.header('content-security-policy', "default-src 'none'; frame-ancestors 'none'")
  })
  await app.register(fastifySSE, { heartbeatInterval: options.sseHeartbeatMs })
  await registerConsole(app)

  const metrics = registerMetrics(app, options.metrics)
  registerOverloadMetrics(overload, metrics)
  registerHealthRoutes(app, deps, metrics, {
    token: options.metricsToken,
    openWithoutToken: isLoopback(options.host ?? '127.0.0.1'),
  })

  // Token lookups are cached; revocations and disabled users (from any instance) drop them at once.
  const userAuth = createUserAuth(deps.accounts, new TokenCache(options.store.access))
  const authenticate = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    try {
      await userAuth(request)
    } catch (error) {
      refuseIfBlocked(request, reply)
      throw error
    }
  }
  app.decorateRequest('user', null)
  app.decorateRequest('tokenId', null)
  await app.register(
    async (api) => {
      api.addHook('onRequest', authenticate)
      // A POST or PATCH without a body means "no fields", not "wrong type".
      api.addHook('preValidation', async (request) => {
        if (request.body === undefined && (request.method === 'POST' || request.method === 'PATCH')) request.body = {}
      })
      registerMeRoutes(api)
      registerStreamTicketRoutes(api, deps)
      registerProjectRoutes(api, deps)
      registerWebhookRoutes(api, deps)
      registerScheduleRoutes(api, deps)
      registerConversationRoutes(api, deps)
      registerCompactionRoutes(api, deps)
      registerCommandRoutes(api, deps)
      registerDecisionRoutes(api, deps)
      registerAuditRoutes(api, deps)
      registerUsageRoutes(api, deps)
      registerRunRoutes(api, deps)
      registerUiStreamRoutes(api, deps)
      registerAgUiRoutes(api, deps)
      registerKnowledgeRoutes(api, deps)
      registerMemoryRoutes(api, deps)
      registerFileRoutes(api, deps)
      registerMcpConnectionRoutes(api, deps)
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
      registerAdminUsageRoutes(admin, deps)
    },
    { prefix: '/api/admin' },
  )

  registerMcpCallbackRoute(app, deps)
  // The MCP server: the same tokens, limits and audit as /api (see routes/mcp-routes.ts).
  await registerMcpRoutes(app, deps, {
    authenticate,
    authorizationServers: options.mcpAuthorizationServers ?? [],
    version: options.version,
  })

  return app
}

/** Routes polled by probes and scrapers: logged at debug, not info. */
const quietRoutes = new Set(['/healthz', '/readyz', '/metrics'])

/** True when `host` only accepts connections from this machine. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host)
}

/** A rate-limit window as people say it: `1 minute`, `30 seconds`, `250 ms`. */
function windowText(ms: number): string {
  if (ms % 60_000 === 0) return ms === 60_000 ? '1 minute' : `${ms / 60_000} minutes`
  if (ms % 1000 === 0) return ms === 1000 ? '1 second' : `${ms / 1000} seconds`
  return `${ms} ms`
}
