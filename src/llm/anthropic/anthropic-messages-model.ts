import {
  defaultUpstreamLimits,
  type UpstreamLimits,
  ModelError,
  type LanguageModel,
  type ModelParams,
  type ModelRequest,
  type StreamPart,
  type ModelCapability,
} from '../model.js'
import { streamEventsFromUpstream } from '../openai/event-stream-request.js'
import { safeParseJson } from '../openai/safe-json.js'
import { defaultToolsUnsupportedKeywords, modelSecrets, redactModelError } from '../openai/upstream-errors.js'
import { AnthropicStreamParser } from './anthropic-stream-parser.js'
import { convertToAnthropicMessages, convertToAnthropicTools } from './convert-to-anthropic-messages.js'

export interface AnthropicMessagesModelOptions extends UpstreamLimits {
  /** The configured model id (what runs name). */
  id: string
  /** The upstream model name sent as `model`. */
  model: string
  /** Base URL of a Messages API; requests go to `${baseUrl}/v1/messages` (a base already ending in `/v1` is used as is). */
  baseUrl: string
  /** Sent as `x-api-key`; never logged or put in error messages. */
  apiKey?: string
  contextWindow: number
  supportsTools: boolean
  /** Images (`vision`) or PDF documents (`pdf`) in messages (`models[].capabilities`). */
  capabilities?: readonly ModelCapability[]
  /** Defaults of every request (`max_tokens` defaults to 4096); a request's own win. */
  params?: ModelParams
  /** 4xx bodies containing one of these (case-insensitive) mean "this model takes no tools". */
  toolsUnsupportedKeywords?: readonly string[]
  /** Extra request headers (e.g. `anthropic-beta`). */
  headers?: Record<string, string>
}

/**
 * A model behind the Anthropic Messages streaming API, read over HTTP (undici) + server-sent events. Yields
 * canonical parts; throws ModelError exactly like the OpenAI-compatible adapter. A stream that ends before
 * the message says why it stopped is an `upstream_error` (retryable; the caller knows whether it yielded).
 *
 * @example
 * const model = new AnthropicMessagesModel({ id: 'claude', model: config.model, baseUrl: config.baseUrl, apiKey, contextWindow: 200_000, supportsTools: true })
 */
export class AnthropicMessagesModel implements LanguageModel {
  readonly id: string
  readonly provider = 'anthropic' as const
  readonly supportsTools: boolean
  readonly capabilities: readonly ModelCapability[]
  readonly contextWindow: number
  readonly #options: AnthropicMessagesModelOptions

  constructor(options: AnthropicMessagesModelOptions) {
    this.id = options.id
    this.supportsTools = options.supportsTools
    this.capabilities = options.capabilities ?? []
    this.contextWindow = options.contextWindow
    this.#options = options
  }

  async *stream(request: ModelRequest): AsyncGenerator<StreamPart> {
    const options = this.#options
    const tools = this.supportsTools ? request.tools : []
    const prompt = convertToAnthropicMessages(request.messages, {
      pdf: this.capabilities.includes('pdf'),
      toolBlocks: tools.length > 0,
    })
    const params = { ...options.params, ...request.params }
    const body: Record<string, unknown> = { model: options.model, max_tokens: params.maxTokens ?? 4096 }
    if (params.temperature !== undefined) body.temperature = params.temperature
    if (params.topP !== undefined) body.top_p = params.topP
    if (params.stop !== undefined && params.stop.length > 0) body.stop_sequences = params.stop
    if (prompt.system !== undefined) body.system = prompt.system
    body.messages = prompt.messages
    if (tools.length > 0) body.tools = convertToAnthropicTools(tools)
    body.stream = true
    const headers: Record<string, string> = { 'anthropic-version': '2023-06-01', ...options.headers }
    if (options.apiKey) headers['x-api-key'] = options.apiKey
    const base = options.baseUrl.replace(/\/+$/, '')

    const parser = new AnthropicStreamParser()
    try {
      const events = streamEventsFromUpstream({
        url: base.endsWith('/v1') ? `${base}/messages` : `${base}/v1/messages`,
        headers,
        body,
        idleTimeoutMs: options.idleTimeoutMs ?? defaultUpstreamLimits.idleTimeoutMs,
        callTimeoutMs: options.callTimeoutMs ?? defaultUpstreamLimits.callTimeoutMs,
        maxAnswerBytes: options.maxAnswerBytes ?? defaultUpstreamLimits.maxAnswerBytes,
        toolsUnsupportedKeywords: options.toolsUnsupportedKeywords ?? defaultToolsUnsupportedKeywords,
        signal: request.signal,
        isLast: (event) => event.event === 'message_stop',
      })
      for await (const event of events) {
        const parsed = safeParseJson(event.data)
        if (!parsed.ok) continue
        yield* parser.push(parsed.value, event.event)
        if (parser.isStopped) break
      }
      if (!parser.isComplete)
        throw new ModelError('upstream_error', 'The upstream stream ended before the message was complete', {
          isRetryable: true,
        })
    } catch (error) {
      if (!(error instanceof ModelError)) throw error
      const redacted = redactModelError(error, modelSecrets(options.apiKey, options.headers))
      // Tokens the upstream reported before failing are billed all the same.
      throw parser.usage && !redacted.usage ? redacted.with({ usage: parser.usage }) : redacted
    }
    yield* parser.finish()
  }
}
