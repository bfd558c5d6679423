import { randomUUID } from 'node:crypto'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { HttpProblem, problemBody, type ProblemCode } from './problem.js'

/** Requests per client address and failed authentications per address, before any token is looked at. */
export interface AddressLimits {
  /** Requests per address per window, counted before authentication. */
  addressMax: number
  windowMs: number
  /** Failed authentications (401) per address per window; past it the address gets 429 until the window ends. */
  authFailureMax: number
  authFailureWindowMs: number
}

/** Routes probes call; never limited. */
const unlimited = new Set(['/healthz', '/readyz'])

const requestIdPattern = /^[A-Za-z0-9._:-]{1,128}$/

/** A client's `x-request-id` when it is short and plain, else a fresh one (never logged as sent). */
export function requestId(request: IncomingMessage): string {
  const header = request.headers['x-request-id']
  return typeof header === 'string' && requestIdPattern.test(header) ? header : randomUUID()
}

/**
 * Limits by client address in the first hook of every request, so wrong tokens are counted too:
 * every request counts against `addressMax`, and every 401 against the stricter `authFailureMax`,
 * after which the address is refused (429) until its window ends. Every answer, 401s included,
 * carries the address budget in `x-ratelimit-*` (authenticated routes then show the token's).
 */
export function limitByAddress(app: FastifyInstance, limits: AddressLimits): void {
  const countRequest = app.createRateLimit({
    max: limits.addressMax,
    timeWindow: limits.windowMs,
    keyGenerator: (request) => `addr:${request.ip}`,
  })
  const countFailure = app.createRateLimit({
    max: limits.authFailureMax,
    timeWindow: limits.authFailureWindowMs,
    keyGenerator: (request) => `authfail:${request.ip}`,
  })
  const blocked = new Map<string, number>()

  app.addHook('onRequest', async (request, reply) => {
    if (unlimited.has(request.url.split('?')[0] ?? '')) return
    const until = blocked.get(request.ip)
    if (until !== undefined) {
      if (until > Date.now()) {
        // A user token is let through to be checked (one indexed hash lookup; the address limit below
        // still bounds the volume): the address is shared by every user behind it, and by the metrics
        // scraper. Only a failed check is then refused 429 — see `refuseIfBlocked`. The admin API and
        // token-less requests stay shut.
        const path = request.url.split('?')[0] ?? ''
        const userRoute =
          (path.startsWith('/api/') && !path.startsWith('/api/admin')) ||
          path === '/mcp' ||
          path.startsWith('/mcp/') ||
          path === '/metrics'
        if (!userRoute || !request.headers.authorization) {
          throw limited(
            reply,
            'authentication failed too often from this address',
            limits.authFailureMax,
            until - Date.now(),
          )
        }
        deferredBlocks.set(request, { until, max: limits.authFailureMax })
      } else blocked.delete(request.ip)
    }
    const count = await countRequest(request)
    if (count.isAllowed) return
    reply
      .header('x-ratelimit-limit', count.max)
      .header('x-ratelimit-remaining', count.remaining)
      .header('x-ratelimit-reset', count.ttlInSeconds)
    if (count.isExceeded) throw limited(reply, 'too many requests from this address', count.max, count.ttl)
  })

  app.addHook('onResponse', async (request, reply) => {
    if (reply.statusCode !== 401) return
    const count = await countFailure(request)
    // The failure that spends the budget closes the door: the next attempt is already refused.
    if (count.isAllowed || count.remaining > 0) return
    blocked.set(request.ip, Date.now() + count.ttl)
    // Bounded: an attacker spreading over many addresses must not grow this without end.
    if (blocked.size > 50_000) {
      const now = Date.now()
      for (const [address, end] of blocked) if (end <= now || blocked.size > 50_000) blocked.delete(address)
    }
  })
}

/** Requests from a blocked address let through to have their token checked. */
const deferredBlocks = new WeakMap<FastifyRequest, { until: number; max: number }>()

/**
 * Called when authentication failed: from an address over its failure budget, the answer is 429 (with
 * Retry-After) instead of 401, so guessing tokens stays shut while valid tokens behind it still work.
 */
export function refuseIfBlocked(request: FastifyRequest, reply: FastifyReply): void {
  const deferred = deferredBlocks.get(request)
  if (deferred)
    throw limited(reply, 'authentication failed too often from this address', deferred.max, deferred.until - Date.now())
}

function limited(reply: FastifyReply, why: string, max: number, ttlMs: number): HttpProblem {
  const seconds = Math.max(1, Math.ceil(ttlMs / 1000))
  reply
    .header('retry-after', seconds)
    .header('x-ratelimit-limit', max)
    .header('x-ratelimit-remaining', 0)
    .header('x-ratelimit-reset', seconds)
  return new HttpProblem('rate_limited', `${why}; retry in ${seconds} s`)
}

/**
 * Caps open connections per client address (and in total): a connection over the cap is answered
 * 429 problem+json and closed before any request is read.
 */
/** Each connection's latest request and its answer (for `clientErrorHandler`). */
const inFlight = new WeakMap<Socket, { request: IncomingMessage; response: ServerResponse }>()

export function limitConnections(server: Server, perAddress: number, total: number): void {
  server.on('request', (request: IncomingMessage, response: ServerResponse) =>
    inFlight.set(request.socket, { request, response }),
  )
  const open = new Map<string, number>()
  let count = 0
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? 'unknown'
    const held = open.get(address) ?? 0
    if (held >= perAddress || count >= total) {
      // Nothing of the request is read (so no handler runs for it): the answer is written and the socket closed.
      socket.pause()
      const body = JSON.stringify(
        problemBody(
          'rate_limited',
          held >= perAddress
            ? `more than ${perAddress} open connections from this address`
            : 'the server is at its connection limit',
        ),
      )
      socket.end(
        `HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n${body}`,
      )
      socket.destroySoon()
      return
    }
    open.set(address, held + 1)
    count++
    socket.once('close', () => {
      count--
      const left = (open.get(address) ?? 1) - 1
      if (left <= 0) open.delete(address)
      else open.set(address, left)
    })
  })
}

/**
 * Node's own protocol errors (malformed requests, header overflow, request timeout) as problem+json.
 * Logged without the raw packet: it would hold whatever the client sent, credentials included.
 */
export function clientErrorHandler(this: FastifyInstance, error: Error & { code?: string }, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return
  const [status, reason, code]: [number, string, ProblemCode] =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'Request Timeout', 'request_timeout']
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', 'headers_too_large']
        : [400, 'Bad Request', 'bad_request']
  this.log.debug({ code: error.code, status }, 'client error')
  // Not when the request in flight was already answered before its body arrived (a 401, say, then
  // the body never finished): a second answer on the connection would corrupt it. Earlier requests
  // of a kept-alive connection, complete and answered, do not count.
  const current = inFlight.get(socket)
  const answered = current !== undefined && !current.request.complete && current.response.headersSent
  if (socket.writable && !answered) {
    const detail =
      code === 'bad_request'
        ? 'malformed HTTP request'
        : code === 'request_timeout'
          ? 'the request did not arrive whole in time (PLINTH_REQUEST_TIMEOUT)'
          : 'the request headers are larger than the server accepts'
    const body = JSON.stringify(problemBody(code, detail))
    socket.write(
      `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    )
  }
  socket.destroy()
}

/**
 * What Node answers by itself, as problem+json: an `Expect` it cannot meet (Node's 417 has no body)
 * and `CONNECT` (Node closes the socket without a word; this is not a proxy).
 */
export function answerUnservedRequests(server: Server): void {
  server.on('checkExpectation', (_request: IncomingMessage, response: ServerResponse) => {
    const body = JSON.stringify(problemBody('expectation_failed', 'only Expect: 100-continue is supported'))
    response.shouldKeepAlive = false
    response
      .writeHead(417, { 'content-type': 'application/problem+json', 'content-length': Buffer.byteLength(body) })
      .end(body)
  })
  server.on('connect', (_request: IncomingMessage, socket: Socket) => {
    const body = JSON.stringify(problemBody('method_not_allowed', 'CONNECT is not served: this is not a proxy'))
    socket.end(
      `HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    )
    socket.on('error', () => undefined)
    socket.destroySoon()
  })
}

/** Router errors (bad percent-encoding, over-long path segments) as problem+json, without echoing the URL. */
export function frameworkErrors(error: Error & { code?: string }, request: FastifyRequest, reply: FastifyReply): void {
  const code: ProblemCode = error.code === 'FST_ERR_MAX_PARAM_LENGTH' ? 'uri_too_long' : 'bad_request'
  const detail =
    code === 'uri_too_long'
      ? 'a path segment is longer than allowed'
      : 'the URL is not valid (malformed percent-encoding?)'
  const body = problemBody(code, detail)
  reply.code(body.status).type('application/problem+json').send(body)
}

/** A route that takes no query string: any field but `?ticket=` (authentication, read before) is unknown. */
export async function refuseQueryString(request: FastifyRequest): Promise<void> {
  const unknown = Object.keys((request.query as Record<string, unknown> | undefined) ?? {}).filter(
    (name) => name !== 'ticket',
  )
  if (unknown.length === 0) return
  const errors = unknown.map((name) => ({ path: `querystring.${name}`, message: 'unknown field' }))
  throw new HttpProblem('validation_failed', errors.map((error) => `${error.path}: ${error.message}`).join('; '), {
    errors,
  })
}
