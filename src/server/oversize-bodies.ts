import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import { problemBody } from './problem.js'

/** Bodies parsed in memory against `bodyLimit` (uploads stream through their own limits). */
function parsedInMemory(request: IncomingMessage): boolean {
  const type = (request.headers['content-type'] ?? '').toLowerCase()
  return type === '' || /^application\/([\w.+-]*\+)?json\b/.test(type) || type.startsWith('text/')
}

/**
 * A client that sends `Expect: 100-continue` with a JSON body over `bodyLimit` is answered 413 before
 * `100 Continue`, so it never sends the body (curl does this for bodies over 1 MiB). Anything else
 * continues as Node would.
 */
export function refuseOversizeBeforeContinue(
  server: Server,
  serverLimit: number,
  routeLimit: (method: string, path: string) => number | undefined = () => undefined,
): void {
  server.on('checkContinue', (request: IncomingMessage, response: ServerResponse) => {
    const length = Number(request.headers['content-length'])
    // A route with a limit of its own (the UI message stream's 8 MiB) is held to that one.
    const bodyLimit = routeLimit(request.method ?? '', (request.url ?? '').split('?')[0] ?? '') ?? serverLimit
    if (parsedInMemory(request) && Number.isFinite(length) && length > bodyLimit) {
      const body = JSON.stringify(
        problemBody(
          'payload_too_large',
          `request body is ${length} bytes; the limit is ${bodyLimit}${bodyLimit === serverLimit ? ' (PLINTH_BODY_LIMIT)' : ' on this route'}`,
          { instance: (request.url ?? '').split('?')[0]?.slice(0, 200) ?? '' },
        ),
      )
      response.writeHead(413, {
        'content-type': 'application/problem+json; charset=utf-8',
        'content-length': Buffer.byteLength(body),
        connection: 'close',
      })
      response.end(body)
      return
    }
    response.writeContinue()
    server.emit('request', request, response)
  })
}

/** How much of a refused body is read and dropped so the client can read the answer, and for how long. */
export const drainLimits = { bytes: 64 * 1024 * 1024, ms: 10_000 }

/**
 * After a 413 the client may still be sending: closing at once makes it fail with EPIPE before it reads
 * the answer. The rest of the body is read and dropped (bounded in bytes and time; past the bounds the
 * connection is cut), and the connection stays usable.
 */
export function drainRefusedBody(request: IncomingMessage, limits = drainLimits): void {
  if (request.complete || request.destroyed) return
  let drained = 0
  const socket = request.socket
  const stop = (): void => {
    clearTimeout(timer)
    request.removeListener('data', count)
    socket.destroy()
  }
  const count = (chunk: Buffer): void => {
    drained += chunk.length
    if (drained > limits.bytes) stop()
  }
  const timer = setTimeout(stop, limits.ms)
  timer.unref()
  request.on('data', count)
  request.once('end', () => {
    clearTimeout(timer)
    request.removeListener('data', count)
  })
  request.resume()
}
