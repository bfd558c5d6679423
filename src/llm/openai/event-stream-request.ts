import { createParser, type EventSourceMessage } from 'eventsource-parser'
import { request, type Dispatcher } from 'undici'
import { ModelError } from '../model.js'
import { createHttpError, describeErrorBody } from './upstream-errors.js'
import { withTraceHeaders } from '../../telemetry/index.js'

export interface EventStreamRequestOptions {
  url: string
  headers: Record<string, string>
  /** The JSON body: a value, or its JSON text or UTF-8 bytes (sent as they are). */
  body: unknown
  /** Abort and throw `timeout` when no bytes arrive for this long (also while waiting for headers). */
  idleTimeoutMs: number
  /** Abort and throw `timeout` when the whole call takes longer (a stream that trickles for ever). */
  callTimeoutMs?: number
  /**
   * Abort and throw `output_too_large` past this many bytes of the answer's body: what one call may
   * make the server hold (an endless stream, a line that never ends). An error body is read up to
   * `errorBodyBytes` only.
   */
  maxAnswerBytes?: number
  toolsUnsupportedKeywords: readonly string[]
  /** The caller's cancellation: aborts the request and throws `cancelled`. */
  signal?: AbortSignal
  /**
   * The provider's end of the answer (OpenAI's `[DONE]`, Anthropic's `message_stop`). A consumer that
   * stops there leaves the connection to be reused; one that stops before it closes the connection.
   */
  isLast?: (event: EventSourceMessage) => boolean
}

/**
 * POSTs a JSON body and yields the server-sent events of the answer. Provider-neutral: the OpenAI and
 * Anthropic adapters both use it.
 *
 * Throws ModelError only: non-2xx → see `createHttpError`; network failures and connections cut mid-stream
 * → retryable `upstream_error` (the caller knows whether it already yielded); no bytes for `idleTimeoutMs`,
 * or the call past `callTimeoutMs` → `timeout`; the body past `maxAnswerBytes` → `output_too_large`;
 * `signal` aborted → `cancelled`. A clean end of the body ends the iteration. Stopping the
 * iteration early closes the connection, unless it was at the answer's end (`isLast`): then the rest of
 * the body is read and dropped (for at most a second) and the connection goes back to the pool.
 *
 * Through undici's `request`, not `fetch`: fetch's WHATWG streams and objects cost about four times the
 * CPU per call on this path, on the round's critical path (docs/reference/benchmarks.md#the-round-on-postgres).
 */
export async function* streamEventsFromUpstream(
  options: EventStreamRequestOptions,
): AsyncGenerator<EventSourceMessage> {
  const { signal } = options
  if (signal?.aborted) throw cancelledError(signal.reason)
  const controller = new AbortController()
  let abortedBy: 'timeout' | 'call-timeout' | 'cancelled' | undefined
  const onCallerAbort = (): void => {
    abortedBy ??= 'cancelled'
    controller.abort()
  }
  signal?.addEventListener('abort', onCallerAbort, { once: true })
  const callTimer =
    options.callTimeoutMs === undefined
      ? undefined
      : setTimeout(() => {
          abortedBy ??= 'call-timeout'
          controller.abort()
        }, options.callTimeoutMs)
  const maxAnswerBytes = options.maxAnswerBytes ?? Number.POSITIVE_INFINITY
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
    if (abortedBy === 'call-timeout')
      return new ModelError(
        'timeout',
        `The model call took longer than ${options.callTimeoutMs} ms (llmCallTimeoutMs)`,
        {
          cause: error,
        },
      )
    if (abortedBy === 'cancelled') return cancelledError(error)
    const reason = describeNetworkError(error)
    const message =
      phase === 'connect'
        ? `Could not reach the upstream: ${reason}`
        : `The upstream connection broke mid-stream: ${reason}`
    return new ModelError('upstream_error', message, { isRetryable: true, cause: error })
  }

  let body: Dispatcher.ResponseData['body'] | undefined
  // Whether the consumer was given the answer's last event (`isLast`).
  let answered = false
  try {
    let response: Dispatcher.ResponseData
    try {
      response = await waitingForUpstream(() =>
        request(options.url, {
          method: 'POST',
          // The run's trace goes on upstream (`traceparent`), when tracing is on.
          headers: withTraceHeaders({
            'content-type': 'application/json',
            accept: 'text/event-stream',
            ...options.headers,
          }),
          body:
            typeof options.body === 'string' || Buffer.isBuffer(options.body)
              ? options.body
              : JSON.stringify(options.body),
          // No redirect is followed (undici's `request` follows none): it would carry the key headers to
          // wherever it points; it is reported instead. The idle clock above is the only timeout.
          headersTimeout: 0,
          bodyTimeout: 0,
          signal: controller.signal,
        }),
      )
    } catch (error) {
      throw toModelError(error, 'connect')
    }
    body = response.body
    const { statusCode } = response

    if (statusCode < 200 || statusCode > 299) {
      let text = ''
      try {
        const current = body
        text = await waitingForUpstream(() => readAtMost(current, errorBodyBytes))
      } catch (error) {
        // A body we could not read still leaves the status to report, unless we were cancelled.
        if (abortedBy === 'cancelled') throw cancelledError(error)
      }
      throw createHttpError(statusCode, toHeaders(response.headers), text, options.toolsUnsupportedKeywords)
    }

    // A 2xx JSON answer (some gateways report errors this way) is not a stream we can read.
    if (String(response.headers['content-type'] ?? '').includes('application/json')) {
      let text = ''
      try {
        const current = body
        text = await waitingForUpstream(() => readAtMost(current, errorBodyBytes))
      } catch (error) {
        throw toModelError(error, 'stream')
      }
      throw new ModelError(
        'upstream_error',
        `The upstream answered JSON instead of an event stream: ${describeErrorBody(text)}`,
        { upstreamStatus: statusCode, isRetryable: reportsServerError(text) },
      )
    }

    const events: EventSourceMessage[] = []
    const parser = createParser({ onEvent: (event) => events.push(event) })
    // One streaming decoder: a UTF-8 character split across network chunks is decoded whole.
    const decoder = new TextDecoder('utf-8')
    const chunks = body[Symbol.asyncIterator]() as AsyncIterator<Buffer>
    let received = 0
    for (;;) {
      const result = await waitingForUpstream(() => chunks.next()).catch((error: unknown) => {
        throw toModelError(error, 'stream')
      })
      if (!result.done && (received += result.value.length) > maxAnswerBytes)
        throw new ModelError(
          'output_too_large',
          `The upstream's answer passed ${maxAnswerBytes} bytes (llmMaxAnswerBytes); the call was stopped`,
        )
      if (result.done) {
        // Dispatch a last event the server did not terminate with a blank line.
        parser.feed(`${decoder.decode()}\n\n`)
      } else {
        parser.feed(decoder.decode(result.value, { stream: true }))
      }
      while (events.length > 0) {
        const event = events.shift() as EventSourceMessage
        answered ||= options.isLast?.(event) === true
        yield event
      }
      if (result.done) return
    }
  } finally {
    signal?.removeEventListener('abort', onCallerAbort)
    clearTimeout(idleTimer)
    clearTimeout(callTimer)
    if (body && !body.readableEnded && !body.destroyed) {
      // The consumer stopped at the answer's end, which usually comes just before the body's: the rest
      // is read and dropped for a moment, so that the connection goes back to the pool instead of being
      // closed (a new connection for every call otherwise). Stopping anywhere else closes it at once: the
      // upstream would go on generating.
      if (answered && abortedBy === undefined)
        body.dump({ limit: Number.MAX_SAFE_INTEGER, signal: AbortSignal.timeout(1_000) }).catch(() => {})
      else body.destroy()
    }
  }
}

/** How much of an error body is read: enough for any provider's error document, not a flood. */
const errorBodyBytes = 64 * 1024

/** A body's first `limit` bytes as text (the rest is not read; the connection is then closed). */
async function readAtMost(body: Dispatcher.ResponseData['body'], limit: number): Promise<string> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of body as AsyncIterable<Buffer>) {
    chunks.push(chunk)
    size += chunk.length
    if (size >= limit) break
  }
  return new TextDecoder('utf-8').decode(Buffer.concat(chunks).subarray(0, limit))
}

/**
 * Whether a JSON answer's `error` says the upstream itself failed (a gateway's `{"error": {"code": 500}}`
 * or `"type": "server_error"`): worth another attempt, unlike a complaint about the request.
 */
function reportsServerError(text: string): boolean {
  let error: unknown
  try {
    error = (JSON.parse(text) as { error?: unknown }).error
  } catch {
    return false
  }
  if (error === null || typeof error !== 'object') return false
  const { code, type, status } = error as { code?: unknown; type?: unknown; status?: unknown }
  if ([code, status].some((value) => typeof value === 'number' && value >= 500)) return true
  return [code, type, status].some(
    (value) => typeof value === 'string' && /server_error|overloaded|unavailable|internal|^5\d\d$/i.test(value),
  )
}

/** A response's headers as a `Headers` (what the error mapping reads `Retry-After` from). */
function toHeaders(raw: Record<string, string | string[] | undefined>): Headers {
  const headers = new Headers()
  for (const [name, value] of Object.entries(raw)) {
    if (Array.isArray(value)) for (const each of value) headers.append(name, each)
    else if (value !== undefined) headers.set(name, value)
  }
  return headers
}

function cancelledError(cause: unknown): ModelError {
  return new ModelError('cancelled', 'The model request was cancelled', { cause })
}

/** A short reason for a network failure, with its code (e.g. ECONNREFUSED, UND_ERR_SOCKET) when there is one. */
function describeNetworkError(error: unknown): string {
  if (!(error instanceof Error)) return String(error)
  const code = (error as { code?: unknown }).code
  if (typeof code === 'string' && !error.message.includes(code)) return `${error.message} (${code})`
  const cause = error.cause as { code?: unknown; message?: unknown } | undefined
  if (cause && typeof cause.code === 'string') return `${error.message} (${cause.code})`
  if (cause && typeof cause.message === 'string' && cause.message) return `${error.message} (${cause.message})`
  return error.message
}
