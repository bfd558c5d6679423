import { Type } from 'typebox'
import type { FastifyRequest } from 'fastify'
import { McpConnectError } from '../../mcp/index.js'
import { caller } from '../auth.js'
import { HttpProblem } from '../problem.js'
import { Problem, problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['mcp']
const Server = Type.String({ maxLength: 40, pattern: '^[a-z][a-z0-9]*(_[a-z0-9]+)*$' })
const Connection = Type.Object({
  server: Type.String(),
  connected: Type.Boolean({ description: 'The user’s account is connected (tokens stored, sealed)' }),
  pending: Type.Boolean({ description: 'An authorization was started and its callback has not arrived' }),
})

/** Where the authorization server sends the user back: this server, as the user's browser reached it. */
export const callbackPath = '/oauth/mcp/callback'

function callbackUrl(request: FastifyRequest): string {
  return `${request.protocol}://${request.host}${callbackPath}`
}

function problemOf(error: unknown): never {
  if (!(error instanceof McpConnectError)) throw error
  const code = error.code === 'upstream' ? 'command_failed' : error.code
  throw new HttpProblem(code, error.message)
}

/** A user's own connections to MCP servers that require OAuth (docs/mcp.md, "Per-user connections"). */
export function registerMcpConnectionRoutes(api: App, deps: ServerDeps): void {
  const hub = deps.mcp
  api.get(
    '/mcp/connections',
    {
      schema: {
        operationId: 'listMcpConnections',
        tags,
        summary: 'The MCP servers that take per-user OAuth connections, and whether the caller has connected each',
        response: { 200: Type.Object({ items: Type.Array(Connection), nextCursor: Type.Null() }), ...problemResponses },
      },
    },
    async (request) => ({ items: hub ? await hub.connections(caller(request).id) : [], nextCursor: null }),
  )
  api.post(
    '/mcp/connections/:server',
    {
      schema: {
        operationId: 'connectMcpServer',
        tags,
        summary:
          'Start connecting the caller’s account to an OAuth MCP server: open `authorizationUrl` in a browser; the server’s callback finishes it',
        params: Type.Object({ server: Server }, { additionalProperties: false }),
        response: {
          200: Type.Object({ server: Type.String(), authorizationUrl: Type.String() }),
          ...problemResponses,
          502: Type.Ref('Problem'),
          503: Type.Ref('Problem'),
        },
      },
    },
    async (request) => {
      if (!hub) throw new HttpProblem('not_found', `no MCP server ${request.params.server}`)
      try {
        return {
          server: request.params.server,
          ...(await hub.connect(caller(request).id, request.params.server, callbackUrl(request))),
        }
      } catch (error) {
        return problemOf(error)
      }
    },
  )
  api.delete(
    '/mcp/connections/:server',
    {
      schema: {
        operationId: 'disconnectMcpServer',
        tags,
        summary: 'Forget the caller’s connection to an OAuth MCP server (its tokens are deleted)',
        params: Type.Object({ server: Server }, { additionalProperties: false }),
        response: { 204: Type.Null(), ...problemResponses, 503: Type.Ref('Problem') },
      },
    },
    async (request, reply) => {
      if (!hub) throw new HttpProblem('not_found', `no MCP server ${request.params.server}`)
      try {
        if (!(await hub.disconnect(caller(request).id, request.params.server)))
          throw new HttpProblem('not_found', `you have no connection to ${request.params.server}`)
      } catch (error) {
        return problemOf(error)
      }
      return reply.code(204).send(null)
    },
  )
}

const page = (title: string, text: string): string =>
  `<!doctype html><html><head><meta charset="utf-8"><title>${title}</title></head><body><h1>${title}</h1><p>${text}</p></body></html>`
const escape = (text: string): string => text.replace(/[&<>"']/g, (char) => `&#${char.charCodeAt(0)};`)

/** The OAuth redirect target: no bearer (the browser comes from the authorization server); `state` names the user. */
export function registerMcpCallbackRoute(app: App, deps: ServerDeps): void {
  app.get(
    callbackPath,
    {
      schema: {
        operationId: 'mcpOAuthCallback',
        tags,
        summary: 'Where an MCP server’s authorization server returns the user; answers a small HTML page',
        security: [],
        querystring: Type.Object({
          state: Type.Optional(Type.String({ maxLength: 512 })),
          code: Type.Optional(Type.String({ maxLength: 4096 })),
          error: Type.Optional(Type.String({ maxLength: 512 })),
          error_description: Type.Optional(Type.String({ maxLength: 2048 })),
        }),
        // A query string the server refuses (a NUL, a repeated field) is answered as everywhere else.
        response: { 200: Type.String(), 400: Type.Union([Type.String(), Problem]), 502: Type.String() },
      },
    },
    async (request, reply) => {
      reply.type('text/html; charset=utf-8').header('cache-control', 'no-store')
      const { state, code, error } = request.query
      if (error || !state || !code)
        return reply
          .code(400)
          .send(
            page(
              'Not connected',
              escape(error ? `The authorization server said: ${error}` : 'The callback has no code or state.'),
            ),
          )
      if (!deps.mcp)
        return reply.code(400).send(page('Not connected', 'No MCP server here takes per-user connections.'))
      try {
        const done = await deps.mcp.complete(state, code)
        return reply
          .code(200)
          .send(page('Connected', `Your account is connected to ${escape(done.server)}. You can close this window.`))
      } catch (caught) {
        if (!(caught instanceof McpConnectError)) throw caught
        return reply.code(caught.code === 'bad_request' ? 400 : 502).send(page('Not connected', escape(caught.message)))
      }
    },
  )
}
