import type { FastifyReply, FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import type { User } from '../../store/index.js'
import { caller } from '../auth.js'
import { findHostileValue, jsonDepth, maxJsonDepth } from '../hostile-input.js'
import { createMcpServer } from '../mcp/mcp-server.js'
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
    authorization_servers: Type.Array(Type.String(), { description: 'Issuers of tokens for it (none: Plinth issues its own; `plinth tokens create`)' }),
    bearer_methods_supported: Type.Array(Type.String()),
    resource_name: Type.String(),
  },
  { title: 'ProtectedResourceMetadata' },
)

const ScopeParams = Type.Object({ projectId: Type.Optional(Id), conversationId: Type.Optional(Id) }, { additionalProperties: false })

/** A body that is not a JSON-RPC message we can accept: answered with a JSON-RPC error, never a problem. */
class RefusedBody {
  constructor(
    readonly kind: 'parse' | 'invalid',
    readonly message: string,
  ) {}
}

/**
 * The MCP server (Streamable HTTP, stateless): `POST /mcp`, `/mcp/projects/:projectId` and
 * `/mcp/projects/:projectId/conversations/:conversationId`. Each request gets its own MCP server and
 * transport and nothing is kept between requests — no `Mcp-Session-Id` is issued — so instances
 * behind a round-robin balancer all answer any request. Also the protected resource metadata
 * (RFC 9728) 401 answers point MCP clients to.
 */
export async function registerMcpRoutes(app: App, deps: ServerDeps, options: McpRouteOptions): Promise<void> {
  const metadataRoute = (operationId: string, summary: string) => ({ schema: { operationId, tags: ['mcp'], summary, security: [], response: { 200: ProtectedResourceMetadata } } })
  app.get(
    '/.well-known/oauth-protected-resource',
    metadataRoute('getProtectedResourceMetadata', 'Protected resource metadata of the server (RFC 9728): bearer tokens in the Authorization header'),
    async (request) => protectedResourceMetadata(request, '', options.authorizationServers),
  )
  app.get(
    mcpMetadataPath,
    metadataRoute('getMcpProtectedResourceMetadata', 'Protected resource metadata of the MCP endpoint /mcp (RFC 9728), named by its 401 answers'),
    async (request) => protectedResourceMetadata(request, '/mcp', options.authorizationServers),
  )

  await app.register(async (mcp) => {
    mcp.addHook('onRequest', async (request, reply) => {
      try {
        await options.authenticate(request, reply)
      } catch (error) {
        if (error instanceof HttpProblem && error.code === 'unauthorized') reply.header('www-authenticate', bearerChallenge(request))
        throw error
      }
    })
    // JSON-RPC bodies: what cannot be read is answered as JSON-RPC (parse error), not as a problem;
    // other media types reach the transport, which answers 415 in JSON-RPC.
    const parse = mcp.getDefaultJsonParser('error', 'error')
    mcp.removeAllContentTypeParsers()
    mcp.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
      const text = body as string
      if (jsonDepth(text, maxJsonDepth) > maxJsonDepth) return done(null, new RefusedBody('invalid', `Invalid Request: JSON nested deeper than ${maxJsonDepth} levels`))
      parse(request, text, (error, value) => {
        if (error) return done(null, new RefusedBody('parse', 'Parse error: Invalid JSON'))
        const found = findHostileValue(value, 'body')
        done(null, found ? new RefusedBody('invalid', `Invalid Request: ${found.path}: ${found.message}`) : value)
      })
    })
    mcp.addContentTypeParser('*', { parseAs: 'string' }, (_request, body, done) => done(null, body))

    for (const url of ['/mcp', '/mcp/projects/:projectId', '/mcp/projects/:projectId/conversations/:conversationId']) {
      // JSON-RPC, not REST: documented in the README ("Using Plinth from MCP clients"), not in OpenAPI.
      const schema = { hide: true, params: ScopeParams }
      mcp.post(url, { schema }, async (request, reply) => {
        const scope = await resolveScope(deps, caller(request), request.params as { projectId?: string; conversationId?: string })
        // Mounted MCP servers' tools are offered too: they start when first needed.
        await deps.bus.catalog.settled()
        const sdk = await loadMcpSdk()
        const body = request.body
        if (body instanceof RefusedBody) {
          return reply.code(400).type('application/json').send(jsonRpcError(body.kind === 'parse' ? sdk.ErrorCode.ParseError : sdk.ErrorCode.InvalidRequest, body.message))
        }
        const server = createMcpServer(sdk, deps.bus, scope, options.version)
        const transport = new sdk.StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
        await server.connect(transport)
        reply.hijack()
        // Headers the hooks set (request id, rate limits, CORS) go out with the transport's answer.
        for (const [name, value] of Object.entries(reply.getHeaders())) if (value !== undefined) reply.raw.setHeader(name, value)
        reply.raw.once('close', () => {
          transport.close().catch(() => undefined)
          server.close().catch(() => undefined)
        })
        try {
          await transport.handleRequest(request.raw, reply.raw, body)
        } catch (error) {
          request.log.error({ err: error }, 'MCP request failed')
          if (!reply.raw.headersSent) reply.raw.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify(jsonRpcError(sdk.ErrorCode.InternalError, 'Internal error')))
          else reply.raw.destroy()
        }
      })
      // Stateless: no stream to open (GET) and no session to end (DELETE), as in the SDK's stateless examples.
      const methodNotAllowed = async (_request: FastifyRequest, reply: FastifyReply) =>
        reply.code(405).header('allow', 'POST').type('application/json').send(jsonRpcError(-32000, 'Method not allowed.'))
      mcp.get(url, { schema }, methodNotAllowed)
      mcp.delete(url, { schema }, methodNotAllowed)
    }
  })
}

/** The user, project and conversation a request acts in; 404 for a project or conversation the caller may not read. */
async function resolveScope(deps: ServerDeps, user: User, params: { projectId?: string; conversationId?: string }): Promise<McpScope> {
  if (!params.projectId) return { userId: user.id, projectId: null, conversationId: null, subset: null, writable: true }
  const project = await deps.projects.resolve(user, params.projectId)
  if (params.conversationId) {
    const { conversation } = await deps.conversations.resolveWithProject(user, params.conversationId)
    if (conversation.projectId !== project.id) throw notFound('conversation')
  }
  const writable = project.ownerId === user.id || (await deps.bus.mayWrite(user.id, project.id))
  return { userId: user.id, projectId: project.id, conversationId: params.conversationId ?? null, subset: project.tools, writable }
}

function jsonRpcError(code: number, message: string): { jsonrpc: '2.0'; error: { code: number; message: string }; id: null } {
  return { jsonrpc: '2.0', error: { code, message }, id: null }
}
