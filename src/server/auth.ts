import { createHash, timingSafeEqual } from 'node:crypto'
import type { FastifyRequest } from 'fastify'
import type { Accounts, User } from '../store/index.js'
import { HttpProblem } from './problem.js'
import type { TokenCache } from './token-cache.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route reads a multipart/form-data body (elsewhere one is refused with 415). */
    multipart?: boolean
  }
  interface FastifyRequest {
    /** The authenticated caller on `/api` routes. */
    user: User | null
    /** The id of the token the caller authenticated with (streams end when it is revoked). */
    tokenId: string | null
  }
}

const touchIntervalMs = 60_000

/** The bearer token of a request, if any. */
export function bearerToken(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization
  const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null
  return match?.[1]
}

/** An onRequest hook that authenticates `/api` callers by bearer token (401 otherwise). */
export function createUserAuth(accounts: Accounts, cache?: TokenCache): (request: FastifyRequest) => Promise<void> {
  const lastTouched = new Map<string, number>()
  return async (request) => {
    const token = bearerToken(request)
    if (!token) {
      // A browser's EventSource cannot send the header: a single-use ticket opens one stream instead.
      const ticket = streamTicket(request)
      if (!ticket) throw new HttpProblem('unauthorized', 'missing bearer token')
      const redeemed = await accounts.redeemStreamTicket(ticket.value, ticket.path)
      if (!redeemed)
        throw new HttpProblem(
          'unauthorized',
          'invalid, used or expired stream ticket (POST /api/stream-tickets issues one)',
        )
      request.user = redeemed.user
      request.tokenId = redeemed.tokenId
      return
    }
    let found = cache?.get(token)
    if (!found) {
      found = await accounts.authenticate(token)
      if (!found) throw new HttpProblem('unauthorized', 'invalid, revoked or disabled token')
      cache?.set(token, found)
    }
    request.user = found.user
    request.tokenId = found.tokenId
    // Record use at most once a minute per token, off the request path.
    const now = Date.now()
    if ((lastTouched.get(found.tokenId) ?? 0) + touchIntervalMs < now) {
      lastTouched.set(found.tokenId, now)
      accounts
        .touchToken(found.tokenId)
        .catch((error: unknown) => request.log.warn({ err: error }, 'could not record token use'))
    }
  }
}

/** An onRequest hook for `/api/admin`: the operator's `PLINTH_ADMIN_TOKEN`, compared in constant time. */
export function createAdminAuth(adminToken: string): (request: FastifyRequest) => Promise<void> {
  const expected = createHash('sha256').update(adminToken).digest()
  return async (request) => {
    const token = bearerToken(request)
    const given = createHash('sha256')
      .update(token ?? '')
      .digest()
    if (!token || !timingSafeEqual(given, expected)) throw new HttpProblem('unauthorized', 'admin token required')
  }
}

/** The authenticated caller; routes behind the user hook always have one. */
export function caller(request: FastifyRequest): User {
  if (!request.user) throw new HttpProblem('unauthorized')
  return request.user
}

/** `?ticket=` on a GET of an event stream, with the path it must have been issued for. */
function streamTicket(request: FastifyRequest): { value: string; path: string } | undefined {
  if (request.method !== 'GET') return undefined
  const url = request.url
  const query = url.indexOf('?')
  if (query < 0) return undefined
  const path = url.slice(0, query)
  if (!/^\/api\/(runs|conversations|projects)\/[0-9A-Z]{26}\/events$/.test(path)) return undefined
  const value = new URLSearchParams(url.slice(query + 1)).get('ticket')
  return value ? { value, path } : undefined
}
