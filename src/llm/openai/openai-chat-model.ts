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
import { openAIMessagesBytes, openAIToolsJson } from './convert-to-openai-messages.js'
import { streamEventsFromUpstream } from './event-stream-request.js'
import { OpenAIStreamParser } from './openai-stream-parser.js'
import { safeParseJson } from './safe-json.js'
import { defaultToolsUnsupportedKeywords, modelSecrets, redactModelError } from './upstream-errors.js'

export interface OpenAIChatModelOptions extends UpstreamLimits {
  /** The configured model id (what runs name). */
  id: string
  /** The upstream model name sent as `model`. */
  model: string
  /** Base URL of an OpenAI-compatible API, up to and including its version segment (`…/v1`). */
  baseUrl: string
  /** Sent as `Authorization: Bearer …`; never logged or put in error messages. */
  apiKey?: string
  contextWindow: number
  supportsTools: boolean
  /** Images (`vision`) or PDF documents (`pdf`) in messages (`models[].capabilities`). */
  capabilities?: readonly ModelCapability[]
  /** 4xx bodies containing one of these (case-insensitive) mean "this model takes no tools". */
  toolsUnsupportedKeywords?: readonly string[]
  /** Defaults of every request (`temperature`, `max_tokens`, `top_p`, `stop`); a request's own win. */
  params?: ModelParams
  /** Extra request headers (e.g. an organisation header a gateway wants). */
  headers?: Record<string, string>
}

/**
 * A model behind an OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, …), streamed with
 * HTTP (undici) + server-sent events. Yields canonical parts; throws ModelError (see `streamEventsFromUpstream`).
 *
 * @example
 * const model = new OpenAIChatModel({ id: 'local', model: 'qwen2.5', baseUrl: config.baseUrl, contextWindow: 32_768, supportsTools: true })
 * for await (const part of model.stream({ messages, tools })) console.log(part)
 */
export class OpenAIChatModel implements LanguageModel {
  readonly id: string
  readonly provider = 'openai' as const
  readonly supportsTools: boolean
  readonly capabilities: readonly ModelCapability[]
  readonly contextWindow: number
  readonly #options: OpenAIChatModelOptions

  constructor(options: OpenAIChatModelOptions) {
    this.id = options.id
    this.supportsTools = options.supportsTools
    this.capabilities = options.capabilities ?? []
    this.contextWindow = options.contextWindow
    this.#options = options
  }

  async *stream(request: ModelRequest): AsyncGenerator<StreamPart> {
    const options = this.#options
    // A model without tool support never gets tools, whatever the caller passed.
    const tools = this.supportsTools ? request.tools : []
    const body: Record<string, unknown> = {
      model: options.model,
      stream: true,
      stream_options: { include_usage: true },
    }
    const params = { ...options.params, ...request.params }
    if (params.temperature !== undefined) body.temperature = params.temperature
    if (params.topP !== undefined) body.top_p = params.topP
    if (params.maxTokens !== undefined) body.max_tokens = params.maxTokens
    if (params.stop !== undefined && params.stop.length > 0) body.stop = params.stop
    if (request.responseFormat) {
      const { name, schema, strict } = request.responseFormat
      body.response_format = { type: 'json_schema', json_schema: { name, schema, strict } }
    }
    const headers: Record<string, string> = { ...options.headers }
    if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`

    const parser = new OpenAIStreamParser()
    try {
      const events = streamEventsFromUpstream({
        url: `${options.baseUrl.replace(/\/+$/, '')}/chat/completions`,
        headers,
        // The tools and messages go last, as JSON made once per tool and per message. OpenAI rejects
        // `tools: []`; with tools, `tool_choice` defaults to "auto" everywhere, so it is left out.
        body: Buffer.concat([
          Buffer.from(
            `${JSON.stringify(body).slice(0, -1)}${tools.length > 0 ? `,"tools":${openAIToolsJson(tools)}` : ''},"messages":`,
          ),
          ...openAIMessagesBytes(request.messages, { pdf: this.capabilities.includes('pdf') }),
          closingBrace,
        ]),
        idleTimeoutMs: options.idleTimeoutMs ?? defaultUpstreamLimits.idleTimeoutMs,
        callTimeoutMs: options.callTimeoutMs ?? defaultUpstreamLimits.callTimeoutMs,
        maxAnswerBytes: options.maxAnswerBytes ?? defaultUpstreamLimits.maxAnswerBytes,
        toolsUnsupportedKeywords: options.toolsUnsupportedKeywords ?? defaultToolsUnsupportedKeywords,
        signal: request.signal,
        isLast: (event) => event.data.trim() === '[DONE]',
      })
      let readable = 0
      let firstUnreadable: string | undefined
      let done = false
      for await (const event of events) {
        const data = event.data.trim()
        if (data === '[DONE]') {
          done = true
          break
        }
        const parsed = safeParseJson(data)
        // A malformed chunk is skipped, not fatal.
        if (!parsed.ok) {
          firstUnreadable ??= data
          continue
        }
        readable++
        yield* parser.push(parsed.value)
      }
      // Not one readable chunk (an HTML page from a proxy, frames cut short): not an empty answer.
      if (readable === 0) {
        const seen =
          firstUnreadable === undefined
            ? 'no event at all'
            : `only unreadable data (${JSON.stringify(firstUnreadable.slice(0, 120))})`
        throw new ModelError('upstream_error', `The upstream's stream carried ${seen}; expected chat-completion chunks`)
      }
      // A body that ends with neither `[DONE]` nor a finish reason was cut (a proxy's timeout, a crash):
      // what came is not the whole answer, and its tool calls may be missing or half-written.
      if (!done && !parser.isFinished)
        throw new ModelError('upstream_error', 'The upstream stream ended before the answer was complete', {
          isRetryable: true,
        })
    } catch (error) {
      if (!(error instanceof ModelError)) throw error
      // Cut or stalled after the answer said why it finished (only `[DONE]` missing): the answer is whole.
      const whole = parser.isFinished && (error.code === 'upstream_error' || error.code === 'timeout')
      if (whole && !request.signal?.aborted) return yield* parser.finish()
      const redacted = redactModelError(error, modelSecrets(options.apiKey, options.headers))
      // Tokens the upstream reported before failing are billed all the same.
      throw parser.usage && !redacted.usage ? redacted.with({ usage: parser.usage }) : redacted
    }
    yield* parser.finish()
  }
}

const closingBrace = Buffer.from('}')
