import type { FastifyReply, FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import type { McpSessionRecord, User } from '../../store/index.js'
import { caller } from '../auth.js'
import { findHostileValue, jsonDepth, maxJsonDepth } from '../hostile-input.js'
import { applyAnswer, McpElicitor, splitAnswers } from '../mcp/mcp-elicitation.js'
import { McpContent } from '../mcp/mcp-content.js'
import { createMcpServer } from '../mcp/mcp-server.js'
import { answersElicitation, McpSessions, type InitializeParams } from '../mcp/mcp-sessions.js'
import { loadMcpSdk } from '../mcp/mcp-sdk.js'
import type { McpScope } from '../mcp/mcp-tools.js'
import { bearerChallenge, mcpMetadataPath, protectedResourceMetadata } from '../mcp/protected-resource.js'
import { HttpProblem, notFound } from '../problem.js'
import { Id } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

export interface McpRouteOptions {
  /** The `/api` authentication (same tokens, revocation, blocking of failed attempts). */
  authenticate(request: FastifyRequest, reply: FastifyReply): Promise<void>
  /** Listed in the protected resource metadata (default none: Plinth issues its own tokens). */
  authorizationServers: readonly string[]
  version: string
}

const ProtectedResourceMetadata = Type.Object(
  {
    resource: Type.String({ description: 'The protected resource: the server, or its MCP endpoint' }),
    authorization_servers: Type.Array(Type.String(), {
      description: 'Issuers of tokens for it (none: Plinth issues its own; `plinth tokens create`)',
    }),
    bearer_methods_supported: Type.Array(Type.String()),
    resource_name: Type.String(),
  },
  { title: 'ProtectedResourceMetadata' },
)

const ScopeParams = Type.Object(
  { projectId: Type.Optional(Id), conversationId: Type.Optional(Id) },
  { additionalProperties: false },
)

/** A body that is not a JSON-RPC message we can accept: answered with a JSON-RPC error, never a problem. */
class RefusedBody {
  constructor(
    readonly kind: 'parse' | 'invalid',
    readonly message: string,
  ) {}
}

/**
 * The MCP server (Streamable HTTP): `POST /mcp`, `/mcp/projects/:projectId` and
 * `/mcp/projects/:projectId/conversations/:conversationId`. Each request gets its own MCP server and
 * transport; a session (`Mcp-Session-Id`, issued at `initialize`) lives in Postgres, so instances
 * behind a round-robin balancer all answer any request of it. Also the protected resource metadata
 * (RFC 9728) 401 answers point MCP clients to.
 */
export async function registerMcpRoutes(app: App, deps: ServerDeps, options: McpRouteOptions): Promise<void> {
  const metadataRoute = (operationId: string, summary: string) => ({
    schema: { operationId, tags: ['mcp'], summary, security: [], response: { 200: ProtectedResourceMetadata } },
  })
  app.get(
    '/.well-known/oauth-protected-resource',
    metadataRoute(
      'getProtectedResourceMetadata',
      'Protected resource metadata of the server (RFC 9728): bearer tokens in the Authorization header',
    ),
    async (request) => protectedResourceMetadata(request, '', options.authorizationServers),
  )
  app.get(
    mcpMetadataPath,
    metadataRoute(
      'getMcpProtectedResourceMetadata',
      'Protected resource metadata of the MCP endpoint /mcp (RFC 9728), named by its 401 answers',
    ),
    async (request) => protectedResourceMetadata(request, '/mcp', options.authorizationServers),
  )

  const sessions = new McpSessions(deps.store)
  await app.register(async (mcp) => {
    mcp.addHook('onRequest', async (request, reply) => {
      try {
        await options.authenticate(request, reply)
      } catch (error) {
        if (error instanceof HttpProblem && error.code === 'unauthorized')
          reply.header('www-authenticate', bearerChallenge(request))
        throw error
      }
    })
    // JSON-RPC bodies: what cannot be read is answered as JSON-RPC (parse error), not as a problem;
    // other media types reach the transport, which answers 415 in JSON-RPC.
    const parse = mcp.getDefaultJsonParser('error', 'error')
    mcp.removeAllContentTypeParsers()
    mcp.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
      const text = body as string
      if (jsonDepth(text, maxJsonDepth) > maxJsonDepth)
        return done(null, new RefusedBody('invalid', `Invalid Request: JSON nested deeper than ${maxJsonDepth} levels`))
      parse(request, text, (error, value) => {
        if (error) return done(null, new RefusedBody('parse', 'Parse error: Invalid JSON'))
        const found = findHostileValue(value, 'body')
        done(null, found ? new RefusedBody('invalid', `Invalid Request: ${found.path}: ${found.message}`) : value)
      })
    })
    mcp.addContentTypeParser('*', { parseAs: 'string' }, (_request, body, done) => done(null, body))

    for (const url of ['/mcp', '/mcp/projects/:projectId', '/mcp/projects/:projectId/conversations/:conversationId']) {
      // JSON-RPC, not REST: documented in docs/guides/mcp.md ("Using Plinth from MCP clients"), not in OpenAPI.
      const schema = { hide: true, params: ScopeParams }
      mcp.post(url, { schema }, async (request, reply) => {
        const user = caller(request)
        const scope = await resolveScope(deps, user, request.params as { projectId?: string; conversationId?: string })
        // Mounted MCP servers' tools are offered too: they start when first needed.
        await deps.bus.catalog.settled()
        const sdk = await loadMcpSdk()
        if (request.body instanceof RefusedBody) {
          return reply
            .code(400)
            .type('application/json')
            .send(
              jsonRpcError(
                request.body.kind === 'parse' ? sdk.ErrorCode.ParseError : sdk.ErrorCode.InvalidRequest,
                request.body.message,
              ),
            )
        }
        // JSON that is no JSON-RPC message is an invalid request (the SDK calls it a parse error), and
        // params a method's schema refuses are invalid params (the SDK: an internal error with a dump).
        if (request.headers['content-type']?.includes('application/json')) {
          const messages: unknown[] = Array.isArray(request.body) ? request.body : [request.body]
          if (messages.length === 0 || !messages.every((message) => sdk.isMessage(message)))
            return reply
              .code(400)
              .type('application/json')
              .send(jsonRpcError(sdk.ErrorCode.InvalidRequest, 'Invalid Request: not a JSON-RPC 2.0 message'))
          const single = request.body as { id?: string | number; method?: unknown }
          const problem =
            !Array.isArray(request.body) && single.id !== undefined && typeof single.method === 'string'
              ? sdk.paramsProblem({ ...single, method: single.method })
              : undefined
          if (problem)
            return reply.type('application/json').send({
              jsonrpc: '2.0',
              id: single.id,
              error: { code: sdk.ErrorCode.InvalidParams, message: `Invalid params: ${problem}` },
            })
        }
        // An initialize starts afresh whatever session it names: a client whose session was forgotten recovers so.
        const session = isInitialize(request.body) ? null : await findSession(sessions, user, request)
        if (session === 'unknown')
          return reply.code(404).type('application/json').send(jsonRpcError(-32001, 'Session not found'))
        // Answers to Plinth's own elicitations are applied here, whichever instance asked.
        const { answers, rest } = splitAnswers(request.body)
        if (answers.length > 0) {
          if (!session)
            return reply
              .code(400)
              .type('application/json')
              .send(
                jsonRpcError(
                  sdk.ErrorCode.InvalidRequest,
                  'Invalid Request: an elicitation answer needs the Mcp-Session-Id it was asked in',
                ),
              )
          for (const answer of answers) await applyAnswer(deps.bus, deps.store, session, answer)
          if (rest === undefined || (Array.isArray(rest) && rest.length === 0)) return reply.code(202).send()
        }
        const body = answers.length > 0 ? rest : request.body
        const elicits = session !== null && answersElicitation(session) && callsTool(body)
        // A call that may wait for a person answers over SSE (the question, then the result); the rest as JSON.
        const transport = new sdk.StreamableHTTPServerTransport({
          sessionIdGenerator: undefined,
          enableJsonResponse: !elicits,
        })
        const closed = new AbortController()
        const elicitor = elicits ? new McpElicitor({ bus: deps.bus, store: deps.store, transport, session }) : null
        const content = new McpContent(deps.knowledge, user, scope.project)
        // A call waiting for a person ends when the client goes or the server stops.
        const server = createMcpServer(
          sdk,
          { bus: deps.bus, content },
          scope,
          options.version,
          elicitor,
          AbortSignal.any([closed.signal, deps.shutdown]),
        )
        await server.connect(transport)
        if (isInitialize(body)) {
          reply.header('mcp-session-id', await sessions.open(user.id, body.params))
        }
        reply.hijack()
        // Headers the hooks set (request id, rate limits, CORS) go out with the transport's answer.
        for (const [name, value] of Object.entries(reply.getHeaders()))
          if (value !== undefined) reply.raw.setHeader(name, value)
        reply.raw.once('close', () => {
          closed.abort()
          transport.close().catch(() => undefined)
          server.close().catch(() => undefined)
        })
        try {
          await transport.handleRequest(request.raw, reply.raw, body)
        } catch (error) {
          request.log.error({ err: error }, 'MCP request failed')
          if (!reply.raw.headersSent)
            reply.raw
              .writeHead(500, { 'content-type': 'application/json' })
              .end(JSON.stringify(jsonRpcError(sdk.ErrorCode.InternalError, 'Internal error')))
          else reply.raw.destroy()
        }
      })
      // Ending a session: the client is done with it (its row goes; a later request with it gets 404).
      mcp.delete(url, { schema }, async (request, reply) => {
        const id = request.headers['mcp-session-id']
        if (typeof id !== 'string') return methodNotAllowed(request, reply)
        if (!(await sessions.end(id, caller(request).id)))
          return reply.code(404).type('application/json').send(jsonRpcError(-32001, 'Session not found'))
        return reply.code(200).send()
      })
      // No stream to open: the server sends nothing outside the answer to a request.
      mcp.get(url, { schema }, methodNotAllowed)
    }
  })
}

const methodNotAllowed = async (_request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> =>
  reply
    .code(405)
    .header('allow', 'POST, DELETE')
    .type('application/json')
    .send(jsonRpcError(-32000, 'Method not allowed.'))

/** The request's session: null without an `Mcp-Session-Id`, `unknown` when it names none of the caller's. */
async function findSession(
  sessions: McpSessions,
  user: User,
  request: FastifyRequest,
): Promise<McpSessionRecord | null | 'unknown'> {
  const id = request.headers['mcp-session-id']
  if (typeof id !== 'string') return null
  return (await sessions.find(id, user.id)) ?? 'unknown'
}

interface InitializeBody {
  method: 'initialize'
  params: InitializeParams
}

function isInitialize(body: unknown): body is InitializeBody {
  if (!isRecord(body) || body.method !== 'initialize' || !isRecord(body.params)) return false
  return typeof body.params.protocolVersion === 'string' && isRecord(body.params.capabilities)
}

function callsTool(body: unknown): boolean {
  return (Array.isArray(body) ? body : [body]).some((message) => isRecord(message) && message.method === 'tools/call')
}

function isRecord(value: unknown): value is { [key: string]: unknown } {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
}

/** The user, project and conversation a request acts in; 404 for a project or conversation the caller may not read. */
async function resolveScope(
  deps: ServerDeps,
  user: User,
  params: { projectId?: string; conversationId?: string },
): Promise<McpScope> {
  if (!params.projectId)
    return { userId: user.id, user, project: null, projectId: null, conversationId: null, subset: null, writable: true }
  const project = await deps.projects.resolve(user, params.projectId)
  if (params.conversationId) {
    const { conversation } = await deps.conversations.resolveWithProject(user, params.conversationId)
    if (conversation.projectId !== project.id) throw notFound('conversation')
  }
  const writable = project.ownerId === user.id || (await deps.bus.mayWrite(user.id, project.id))
  return {
    userId: user.id,
    user,
    project,
    projectId: project.id,
    conversationId: params.conversationId ?? null,
    subset: project.tools,
    writable,
  }
}

function jsonRpcError(
  code: number,
  message: string,
): { jsonrpc: '2.0'; error: { code: number; message: string }; id: null } {
  return { jsonrpc: '2.0', error: { code, message }, id: null }
}
