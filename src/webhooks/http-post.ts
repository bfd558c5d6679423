import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'
import { ipLiteral, nonPublicReason, publicOnlyLookup } from './address-policy.js'
import { failSpan, openSpan, SpanKind, traceHeadersOf } from '../telemetry/index.js'

export interface PostResult {
  /** The answer's status, or null when none came. */
  statusCode: number | null
  /** Why the attempt failed (null for a 2xx). */
  error: string | null
  durationMs: number
}

export interface PosterOptions {
  allowPrivate: boolean
  timeoutMs: number
  maxResponseBytes: number
}

/**
 * POSTs webhook bodies: keep-alive connections, and unless private addresses are allowed, https only
 * and public addresses only — checked on the address each connection is made to (`publicOnlyLookup`),
 * and on IP literals before connecting. Redirects are not followed (a 3xx fails the attempt); the
 * answer is read up to a cap, then dropped; the whole attempt has a deadline.
 */
export class WebhookPoster {
  readonly #options: PosterOptions
  readonly #http: HttpAgent
  readonly #https: HttpsAgent

  constructor(options: PosterOptions) {
    this.#options = options
    const agentOptions = {
      keepAlive: true,
      maxSockets: 64,
      ...(!options.allowPrivate && { lookup: publicOnlyLookup() }),
    }
    this.#http = new HttpAgent(agentOptions)
    this.#https = new HttpsAgent(agentOptions)
  }

  /** Why a URL may not be posted to right now (the settings may have changed since it was accepted), or null. */
  refusal(url: URL): string | null {
    if (this.#options.allowPrivate) return null
    if (url.protocol !== 'https:')
      return 'https is required (private addresses and http are allowed only with PLINTH_WEBHOOK_ALLOW_PRIVATE)'
    const literal = ipLiteral(url)
    const reason = literal && nonPublicReason(literal)
    return reason ? `${reason}: webhooks may only reach public addresses` : null
  }

  post(url: URL, body: string, headers: Record<string, string>, signal?: AbortSignal): Promise<PostResult> {
    const started = performance.now()
    const elapsed = () => performance.now() - started
    const refused = this.refusal(url)
    if (refused) return Promise.resolve({ statusCode: null, error: refused, durationMs: 0 })
    const { timeoutMs, maxResponseBytes } = this.#options
    // A client span per attempt; the receiver gets its `traceparent` (docs/guides/operating.md#tracing).
    const { span } = openSpan(
      'POST',
      {
        'http.request.method': 'POST',
        'server.address': url.hostname,
        'url.full': `${url.origin}${url.pathname}`,
        'plinth.webhook': true,
      },
      SpanKind.CLIENT,
    )
    return new Promise<PostResult>((resolve) => {
      let settled = false
      const finish = (result: Omit<PostResult, 'durationMs'>) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        if (result.statusCode !== null) span.setAttribute('http.response.status_code', result.statusCode)
        if (result.error)
          failSpan(span, result.error, result.statusCode === null ? 'network' : String(result.statusCode))
        span.end()
        resolve({ ...result, durationMs: elapsed() })
      }
      const send = url.protocol === 'https:' ? httpsRequest : httpRequest
      const request = send(url, {
        method: 'POST',
        agent: url.protocol === 'https:' ? this.#https : this.#http,
        headers: {
          ...headers,
          ...traceHeadersOf(span),
          'content-type': 'application/json',
          'content-length': String(Buffer.byteLength(body)),
          'user-agent': 'Plinth-Webhooks/1',
        },
      })
      const timer = setTimeout(() => {
        request.destroy()
        finish({ statusCode: null, error: `no answer within ${timeoutMs} ms` })
      }, timeoutMs)
      const onAbort = () => {
        request.destroy()
        finish({ statusCode: null, error: 'interrupted: the server was stopping' })
      }
      signal?.addEventListener('abort', onAbort, { once: true })
      request.on('error', (error: NodeJS.ErrnoException) => finish({ statusCode: null, error: describe(error) }))
      request.on('response', (response: IncomingMessage) => {
        const status = response.statusCode ?? 0
        const done = () => finish({ statusCode: status, error: verdict(status) })
        let read = 0
        response.on('data', (chunk: Buffer) => {
          read += chunk.length
          // Enough: the status is known, the rest of the answer is not wanted.
          if (read > maxResponseBytes) {
            response.destroy()
            done()
          }
        })
        response.on('end', done)
        response.on('error', done)
        response.on('close', done)
      })
      request.end(body)
    })
  }

  close(): void {
    this.#http.destroy()
    this.#https.destroy()
  }
}

function verdict(status: number): string | null {
  if (status >= 200 && status < 300) return null
  if (status >= 300 && status < 400) return `answered ${status}: redirects are not followed`
  return `answered ${status}`
}

function describe(error: NodeJS.ErrnoException): string {
  const text =
    error.code === 'WEBHOOK_ADDRESS_NOT_ALLOWED'
      ? error.message
      : `${error.code ? `${error.code}: ` : ''}${error.message}`
  return text.length > 500 ? `${text.slice(0, 500)}…` : text
}
