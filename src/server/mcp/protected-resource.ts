import type { OAuthProtectedResourceMetadata } from '@modelcontextprotocol/sdk/shared/auth.js'
import type { FastifyRequest } from 'fastify'

/** Where the metadata of the MCP endpoint is (RFC 9728 §3.1: the well-known prefix before the resource's path). */
export const mcpMetadataPath = '/.well-known/oauth-protected-resource/mcp'

/** The server's origin as the client reached it (through trusted proxies: their forwarded host and scheme). */
export function requestOrigin(request: FastifyRequest): string | undefined {
  // Only a plain host[:port] goes into a header or a document: never anything a client could smuggle in.
  return /^[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/.test(request.host)
    ? `${request.protocol}://${request.host}`
    : undefined
}

/**
 * The `WWW-Authenticate` challenge of a 401 on `/mcp` (RFC 9728 §5.1): where the resource metadata
 * is, so MCP clients can find out how to authenticate; `invalid_token` when a token was sent.
 */
export function bearerChallenge(request: FastifyRequest): string {
  const origin = requestOrigin(request)
  const parameters = [
    ...(request.headers.authorization ? ['error="invalid_token"'] : []),
    ...(origin ? [`resource_metadata="${origin}${mcpMetadataPath}"`] : []),
  ]
  return parameters.length > 0 ? `Bearer ${parameters.join(', ')}` : 'Bearer'
}

/** The fields of RFC 9728 metadata Plinth fills (the SDK's type, every one of them present). */
export type ResourceMetadata = Required<
  Pick<
    OAuthProtectedResourceMetadata,
    'resource' | 'authorization_servers' | 'bearer_methods_supported' | 'resource_name'
  >
>

/**
 * The protected resource metadata (RFC 9728) of the server (`path` '') or of its MCP endpoint
 * (`path` '/mcp'): bearer tokens in the Authorization header, issued by Plinth itself unless the
 * operator names authorization servers.
 */
export function protectedResourceMetadata(
  request: FastifyRequest,
  path: '' | '/mcp',
  authorizationServers: readonly string[],
): ResourceMetadata {
  const origin = requestOrigin(request) ?? 'http://localhost'
  return {
    resource: `${origin}${path}`,
    authorization_servers: [...authorizationServers],
    bearer_methods_supported: ['header'],
    resource_name: path === '/mcp' ? 'Plinth MCP server' : 'Plinth',
  }
}
