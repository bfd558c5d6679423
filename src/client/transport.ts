import { errorFrom, PlinthError, unreachable } from './errors.js'

export interface ClientOptions {
  /** The server, e.g. `http://127.0.0.1:8080`. In a browser page served by that server, `''` (same origin). */
  baseUrl: string
  /** The API token (`plt_…`), or a function that gives the current one (read before every request). */
  token?: string | (() => string | Promise<string>)
  /** A fetch of your own (a proxy agent, a test double); default: the global fetch. */
  fetch?: typeof fetch
  /**
   * Open streams with single-use stream tickets (`POST /api/stream-tickets`), so the long-lived GET
   * carries no Authorization header (a CORS simple request, and no token in a connection a proxy may
   * log). Default: on in browsers, off in Node (where the bearer header goes on the stream itself).
   */
  streamTickets?: boolean
  /** Reconnection of streams: backoff from `initialDelayMs` doubling to `maxDelayMs` (with jitter); `maxAttempts` in a row (default: no limit). */
  reconnect?: { initialDelayMs?: number; maxDelayMs?: number; maxAttempts?: number }
}

export interface RawRequest {
  body?: unknown
  query?: Record<string, string | number | boolean | null | undefined>
  headers?: Record<string, string>
  signal?: AbortSignal
}

/** Browsers and web workers (no Node `process`): streams go through tickets by default. */
const inBrowser =
  typeof (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node !== 'string'

/** HTTP for the client: JSON calls and streams, with the token on each. */
export class Transport {
  readonly baseUrl: string
  readonly streamTickets: boolean
  readonly reconnect: { initialDelayMs: number; maxDelayMs: number; maxAttempts: number }
  readonly #token: ClientOptions['token']
  readonly #fetch: typeof fetch

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '')
    this.#token = options.token
    // Bound late: a test (or a polyfill) may replace the global fetch after the client is made.
    this.#fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init))
    this.streamTickets = options.streamTickets ?? inBrowser
    this.reconnect = {
      initialDelayMs: 500,
      maxDelayMs: 10_000,
      maxAttempts: Number.POSITIVE_INFINITY,
      ...options.reconnect,
    }
  }

  async token(): Promise<string | undefined> {
    return typeof this.#token === 'function' ? await this.#token() : this.#token
  }

  /** A JSON call by path (any route, typed or not): the parsed body, or a thrown PlinthError. */
  async request<T = unknown>(method: string, path: string, options: RawRequest = {}): Promise<T> {
    const response = await this.fetch(method, path, options)
    if (!response.ok) throw await errorFrom(response)
    if (response.status === 204) return undefined as T
    let text: string
    try {
      text = await response.text()
    } catch (error) {
      if (options.signal?.aborted) throw error
      throw unreachable(this.baseUrl || 'the server', error)
    }
    try {
      return (text ? JSON.parse(text) : undefined) as T
    } catch {
      // A 2xx that is not JSON: something between the client and Plinth (a proxy's page) answered.
      throw new PlinthError(
        response.status,
        'invalid_response',
        `${method} ${path} answered ${response.status} with a body that is not JSON`,
      )
    }
  }

  /** A request with the token: the response whatever its status (network failures throw `unreachable`). */
  async fetch(method: string, path: string, options: RawRequest & { accept?: string } = {}): Promise<Response> {
    const headers = new Headers(options.headers)
    headers.set('accept', options.accept ?? 'application/json')
    const token = await this.token()
    if (token) headers.set('authorization', `Bearer ${token}`)
    let body: FormData | string | undefined
    if (options.body instanceof FormData) body = options.body
    else if (options.body !== undefined) {
      headers.set('content-type', 'application/json')
      body = JSON.stringify(options.body)
    }
    return this.#send(this.url(path, options.query), {
      method,
      headers,
      ...(body !== undefined && { body }),
      ...(options.signal && { signal: options.signal }),
    })
  }

  /**
   * Opens an event stream after `lastEventId`: with a stream ticket (browsers) or the bearer header.
   * Null when the server says there is nothing more (204: a finished run, read to its end).
   */
  async openStream(path: string, lastEventId: string | null, signal: AbortSignal): Promise<Response | null> {
    let response: Response
    if (this.streamTickets) {
      // Tickets exist for the three event streams (/api/runs|conversations|projects/<id>/events).
      const ticket = await this.request<{ url: string }>('POST', '/api/stream-tickets', { body: { path }, signal })
      const url =
        lastEventId === null
          ? ticket.url
          : `${ticket.url}${ticket.url.includes('?') ? '&' : '?'}after=${encodeURIComponent(lastEventId)}`
      response = await this.#send(this.url(url), { headers: { accept: 'text/event-stream' }, signal })
    } else {
      response = await this.fetch('GET', path, {
        accept: 'text/event-stream',
        signal,
        ...(lastEventId !== null && { headers: { 'last-event-id': lastEventId } }),
      })
    }
    if (response.status === 204) return null
    if (!response.ok) throw await errorFrom(response)
    checkStream(response, path)
    return response
  }

  url(path: string, query?: RawRequest['query']): string {
    const search = new URLSearchParams()
    for (const [key, value] of Object.entries(query ?? {}))
      if (value !== undefined && value !== null) search.set(key, String(value))
    const text = search.toString()
    return `${this.baseUrl}${path}${text ? (path.includes('?') ? '&' : '?') + text : ''}`
  }

  async #send(url: string, init: RequestInit): Promise<Response> {
    try {
      return await this.#fetch(new Request(url, init))
    } catch (error) {
      if (init.signal?.aborted) throw error
      throw unreachable(this.baseUrl || 'the server', error)
    }
  }
}

/** An answer that is not an event stream (a proxy's page, a JSON error with 200) is not retried. */
export function checkStream(response: Response, path: string): void {
  const type = response.headers.get('content-type') ?? ''
  if (!response.body || !type.includes('text/event-stream')) {
    throw new PlinthError(
      response.status,
      'invalid_stream',
      `${path} answered ${response.status} ${type || 'without a content type'}, not an event stream`,
    )
  }
}
