import { ModelError, type LanguageModel, type ModelRequest, type StreamPart } from './model.js'
import { streamWithRetries, type RetryOptions } from './retry.js'

/** A fallback chain's part: which model is answering (before its parts), then its stream. */
export type FallbackPart = StreamPart | { type: 'model'; model: LanguageModel }

export interface FallbackOptions extends RetryOptions {
  /** A model's own retries (`models[].retries`); unset: `maxRetries`. */
  retriesOf?: (model: LanguageModel) => number | undefined
  /** Told when the call moves on to the next model. */
  onFallback?: (move: { from: LanguageModel; to: LanguageModel; error: ModelError | undefined }) => void
}

/**
 * Streams the first model of `chain` that answers (docs/guides/agent-runs.md#model-fallback): each with
 * its retries; the next takes over on an upstream failure worth another model (429, 5xx, overloaded,
 * timeouts, a model that refuses tools) — never on a request the upstream rejected (other 4xx), never
 * once a part of the answer was streamed (the partial answer stands and the call fails), never after a
 * cancel. A model that takes no tools is skipped for a request with tools while a later one takes them.
 */
export async function* streamWithFallbacks(
  chain: readonly LanguageModel[],
  request: ModelRequest,
  options: FallbackOptions = {},
): AsyncGenerator<FallbackPart> {
  for (let index = 0; index < chain.length; index++) {
    const model = chain[index]!
    const next = chain[index + 1]
    if (next && lacks(model, request) && chain.slice(index + 1).some((later) => !lacks(later, request))) {
      options.onFallback?.({ from: model, to: next, error: undefined })
      continue
    }
    yield { type: 'model', model }
    let streamed = false
    try {
      const retries = options.retriesOf?.(model)
      for await (const part of streamWithRetries(model, request, {
        ...options,
        ...(retries !== undefined && { maxRetries: retries }),
      })) {
        streamed = true
        yield part
      }
      return
    } catch (error) {
      if (!next || streamed || request.signal?.aborted || !worthAnotherModel(error)) throw error
      options.onFallback?.({ from: model, to: next, error: error as ModelError })
    }
  }
}

/** The model cannot take the request: it offers tools the model does not take, or has images it cannot see. */
function lacks(model: LanguageModel, request: ModelRequest): boolean {
  if (request.tools.length > 0 && !model.supportsTools) return true
  const images = request.messages.some(
    (message) =>
      message.role === 'user' &&
      typeof message.content !== 'string' &&
      message.content.some((part) => part.type === 'image'),
  )
  return images && !model.capabilities?.includes('vision')
}

function worthAnotherModel(error: unknown): boolean {
  if (!(error instanceof ModelError)) return false
  return error.isRetryable || error.code === 'timeout' || error.code === 'tools_unsupported'
}
