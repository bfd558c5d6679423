import { createParser, type EventSourceMessage } from 'eventsource-parser'

/** An answer the server gave as problem+json (or any non-2xx). */
export class ApiError extends Error {
  readonly status: number
  readonly code: string

  constructor(status: number, code: string, message: string) {
    super(message)
    this.name = 'ApiError'
    this.status = status
    this.code = code
  }
}

/** The server could not be reached at all (down, refused, reset). */
export class Unreachable extends Error {
  constructor(url: string, cause: unknown) {
    super(`cannot reach ${url}: ${(cause as { cause?: { code?: string } })?.cause?.code ?? (cause as Error)?.message ?? String(cause)}`)
    this.name = 'Unreachable'
  }
}

export interface StreamEvent {
  id: number | null
  event: string
  data: Record<string, unknown>
}

/** The few HTTP calls `plinth chat` makes, with the bearer token on each (streams included). */
export class ApiClient {
  readonly #url: string
  readonly #token: string

  constructor(url: string, token: string) {
    this.#url = url.replace(/\/+$/, '')
    this.#token = token
  }

  get url(): string {
    return this.#url
  }

  async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const response = await this.#fetch(method, path, body, 'application/json')
    const text = await response.text()
    const parsed = text ? (JSON.parse(text) as unknown) : null
    if (!response.ok) {
      const problem = (parsed ?? {}) as { code?: string; detail?: string; title?: string }
      throw new ApiError(response.status, problem.code ?? `http_${response.status}`, problem.detail ?? problem.title ?? `HTTP ${response.status}`)
    }
    return parsed as T
  }

  /**
   * A request answered with an event stream: each event is handed to `onEvent` as it arrives. Resolves
   * when the server ends the stream (or `signal` aborts it).
   */
  async stream(method: string, path: string, options: { body?: unknown; lastEventId?: number | null; signal?: AbortSignal; onEvent: (event: StreamEvent) => void | Promise<void> }): Promise<void> {
    const response = await this.#fetch(method, path, options.body, 'text/event-stream', options.lastEventId ?? undefined, options.signal)
    if (!response.ok) {
      const problem = (await response.json().catch(() => ({}))) as { code?: string; detail?: string }
      throw new ApiError(response.status, problem.code ?? `http_${response.status}`, problem.detail ?? `HTTP ${response.status}`)
    }
    if (!response.body) return
    const queue: EventSourceMessage[] = []
    const parser = createParser({ onEvent: (event) => queue.push(event) })
    const decoder = new TextDecoder()
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      parser.feed(decoder.decode(chunk, { stream: true }))
      for (const event of queue.splice(0)) {
        let data: Record<string, unknown> = {}
        try {
          data = JSON.parse(event.data) as Record<string, unknown>
        } catch {
          data = { text: event.data }
        }
        await options.onEvent({ id: event.id !== undefined && /^\d+$/.test(event.id) ? Number(event.id) : null, event: event.event ?? 'message', data })
      }
    }
  }

  async #fetch(method: string, path: string, body: unknown, accept: string, lastEventId?: number, signal?: AbortSignal): Promise<Response> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.#token}`, accept }
    if (body !== undefined) headers['content-type'] = 'application/json'
    if (lastEventId !== undefined) headers['last-event-id'] = String(lastEventId)
    try {
      return await fetch(`${this.#url}${path}`, { method, headers, ...(body !== undefined && { body: JSON.stringify(body) }), ...(signal && { signal }) })
    } catch (error) {
      if (signal?.aborted) throw error
      throw new Unreachable(this.#url, error)
    }
  }
}
