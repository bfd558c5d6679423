import { createParser, type EventSourceMessage } from 'eventsource-parser'
import { ModelError } from '../model.js'
import { createHttpError, describeErrorBody } from './upstream-errors.js'
import { withTraceHeaders } from '../../telemetry/index.js'

export interface EventStreamRequestOptions {
  url: string
  headers: Record<string, string>
  /** The JSON body: a value, or its JSON text (sent as it is). */
  body: unknown
  /** Abort and throw `timeout` when no bytes arrive for this long (also while waiting for headers). */
  idleTimeoutMs: number
  toolsUnsupportedKeywords: readonly string[]
  /** The caller's cancellation: aborts the request and throws `cancelled`. */
  signal?: AbortSignal
}

/**
 * POSTs a JSON body and yields the server-sent events of the answer. Provider-neutral: the OpenAI and
 * Anthropic adapters both use it.
 *
 * Throws ModelError only: non-2xx → see `createHttpError`; fetch failures and connections cut mid-stream
 * → retryable `upstream_error` (the caller knows whether it already yielded); no bytes for `idleTimeoutMs`
 * → `timeout`; `signal` aborted → `cancelled`. A clean end of the body ends the iteration. Stopping the
 * iteration early aborts the request.
 */
export async function* streamEventsFromUpstream(
  options: EventStreamRequestOptions,
): AsyncGenerator<EventSourceMessage> {
  const { signal } = options
  if (signal?.aborted) throw cancelledError(signal.reason)
  const controller = new AbortController()
  let abortedBy: 'timeout' | 'cancelled' | undefined
  const onCallerAbort = (): void => {
    abortedBy ??= 'cancelled'
    controller.abort()
  }
  signal?.addEventListener('abort', onCallerAbort, { once: true })
  // The idle clock runs only while we wait on the network, never while the consumer holds a part.
  let idleTimer: ReturnType<typeof setTimeout> | undefined
  const waitingForUpstream = async <T>(work: () => Promise<T>): Promise<T> => {
    idleTimer = setTimeout(() => {
      abortedBy ??= 'timeout'
      controller.abort()
    }, options.idleTimeoutMs)
    try {
      return await work()
    } finally {
      clearTimeout(idleTimer)
    }
  }
  const toModelError = (error: unknown, phase: 'connect' | 'stream'): ModelError => {
    if (error instanceof ModelError) return error
    if (abortedBy === 'timeout')
      return new ModelError('timeout', `The upstream sent nothing for ${options.idleTimeoutMs} ms`, { cause: error })
    if (abortedBy === 'cancelled') return cancelledError(error)
    const reason = describeNetworkError(error)
    const message =
      phase === 'connect'
        ? `Could not reach the upstream: ${reason}`
        : `The upstream connection broke mid-stream: ${reason}`
    return new ModelError('upstream_error', message, { isRetryable: true, cause: error })
  }

  let reader: ReadableStreamDefaultReader<Uint8Array> | undefined
  try {
    let response: Response
    try {
      response = await waitingForUpstream(() =>
        fetch(options.url, {
          method: 'POST',
          // The run's trace goes on upstream (`traceparent`), when tracing is on.
          headers: withTraceHeaders({
            'content-type': 'application/json',
            accept: 'text/event-stream',
            ...options.headers,
          }),
          body: typeof options.body === 'string' ? options.body : JSON.stringify(options.body),
          // A redirect would carry the key headers to wherever it points; it is reported instead.
          redirect: 'manual',
          signal: controller.signal,
        }),
      )
    } catch (error) {
      throw toModelError(error, 'connect')
    }

    if (!response.ok) {
      let text = ''
      try {
        text = await waitingForUpstream(() => response.text())
      } catch (error) {
        // A body we could not read still leaves the status to report, unless we were cancelled.
        if (abortedBy === 'cancelled') throw cancelledError(error)
      }
      throw createHttpError(response.status, response.headers, text, options.toolsUnsupportedKeywords)
    }

    // A 2xx JSON answer (some gateways report errors this way) is not a stream we can read.
    if (response.headers.get('content-type')?.includes('application/json')) {
      let text = ''
      try {
        text = await waitingForUpstream(() => response.text())
      } catch (error) {
        throw toModelError(error, 'stream')
      }
      throw new ModelError(
        'upstream_error',
        `The upstream answered JSON instead of an event stream: ${describeErrorBody(text)}`,
        { upstreamStatus: response.status },
      )
    }
    if (!response.body) return

    const events: EventSourceMessage[] = []
    const parser = createParser({ onEvent: (event) => events.push(event) })
    // One streaming decoder: a UTF-8 character split across network chunks is decoded whole.
    const decoder = new TextDecoder('utf-8')
    reader = response.body.getReader()
    for (;;) {
      const current = reader
      const result = await waitingForUpstream(() => current.read()).catch((error: unknown) => {
        throw toModelError(error, 'stream')
      })
      if (result.done) {
        // Dispatch a last event the server did not terminate with a blank line.
        parser.feed(`${decoder.decode()}\n\n`)
      } else {
        parser.feed(decoder.decode(result.value, { stream: true }))
      }
      while (events.length > 0) yield events.shift() as EventSourceMessage
      if (result.done) return
    }
  } finally {
    signal?.removeEventListener('abort', onCallerAbort)
    clearTimeout(idleTimer)
    // Releases the connection when the consumer stopped early; a no-op after a complete body.
    reader?.cancel().catch(() => {})
    controller.abort()
  }
}

function cancelledError(cause: unknown): ModelError {
  return new ModelError('cancelled', 'The model request was cancelled', { cause })
}

/** A short reason for a network failure, from undici's `cause` (e.g. ECONNREFUSED) when there is one. */
function describeNetworkError(error: unknown): string {
  if (!(error instanceof Error)) return String(error)
  const cause = error.cause as { code?: unknown; message?: unknown } | undefined
  if (cause && typeof cause.code === 'string') return `${error.message} (${cause.code})`
  if (cause && typeof cause.message === 'string' && cause.message) return `${error.message} (${cause.message})`
  return error.message
}
