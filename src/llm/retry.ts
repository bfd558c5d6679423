import { ModelError, type LanguageModel, type ModelRequest, type StreamPart } from './model.js'

export interface RetryOptions {
  /** Retries after the first attempt (default 3). */
  maxRetries?: number
  /** Backoff cap of the first retry; doubles per retry (default 250). */
  baseDelayMs?: number
  /** Largest computed backoff (default 8000); a `Retry-After` up to 4× this is waited for, a longer one is not. */
  maxDelayMs?: number
  /** Waits `ms` or until `signal` aborts (tests pass a fake). Default: a timer. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>
  /** A number in [0, 1) for the jitter (default Math.random). */
  random?: () => number
  /** Told before each wait (for logs and metrics). */
  onRetry?: (retry: { attempt: number; delayMs: number; error: ModelError; model: LanguageModel }) => void
}

/**
 * Streams `model` and retries the whole call on a retryable ModelError (429, 5xx, connection failures),
 * but only while nothing was yielded yet: once a part reached the caller the error is rethrown. The wait
 * is the upstream's `retryAfterMs` when it sent one (one longer than 4 × `maxDelayMs` is not waited for:
 * the error is thrown at once, saying what the upstream asked, so a fallback can take over), else exponential
 * backoff with full jitter: random in [0, min(maxDelayMs, baseDelayMs × 2^retry)). Aborting
 * `request.signal` ends a wait with a `cancelled` ModelError.
 *
 * @example
 * for await (const part of streamWithRetries(model, { messages, tools, signal })) handle(part)
 */
export async function* streamWithRetries(
  model: LanguageModel,
  request: ModelRequest,
  options: RetryOptions = {},
): AsyncGenerator<StreamPart> {
  const maxRetries = options.maxRetries ?? 3
  const baseDelayMs = options.baseDelayMs ?? 250
  const maxDelayMs = options.maxDelayMs ?? 8000
  const sleep = options.sleep ?? sleepUnlessAborted
  const random = options.random ?? Math.random
  for (let attempt = 0; ; attempt++) {
    let hasYielded = false
    try {
      for await (const part of model.stream(request)) {
        hasYielded = true
        yield part
      }
      return
    } catch (error) {
      const canRetry =
        error instanceof ModelError &&
        error.isRetryable &&
        !hasYielded &&
        attempt < maxRetries &&
        !request.signal?.aborted
      if (!canRetry) throw error
      // A wait longer than we would ever make is not waited for: the call fails (or falls back) now.
      if (error.retryAfterMs !== undefined && error.retryAfterMs > maxDelayMs * 4)
        throw error.with({
          message: `${error.message} (the upstream asks to retry in ${Math.ceil(error.retryAfterMs / 1000)} s, longer than Plinth waits)`,
        })
      const delayMs = error.retryAfterMs ?? Math.floor(random() * Math.min(maxDelayMs, baseDelayMs * 2 ** attempt))
      options.onRetry?.({ attempt: attempt + 1, delayMs, error, model })
      await sleep(delayMs, request.signal)
      if (request.signal?.aborted)
        throw new ModelError('cancelled', 'The model request was cancelled while waiting to retry', { cause: error })
    }
  }
}

function sleepUnlessAborted(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve()
    const done = (): void => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal?.addEventListener('abort', done, { once: true })
  })
}
