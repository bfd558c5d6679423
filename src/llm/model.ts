/**
 * Canonical model types. Every provider adapter converts to and from these, so the run manager never
 * sees a provider's wire format.
 */

/** A JSON Schema object as given to a model for a tool's parameters. */
export type ToolParameters = { [keyword: string]: unknown }

/** A tool call as the model made it. `id` is the provider's id (sent back upstream with the result). */
export interface ModelToolCall {
  id: string
  name: string
  /** Raw argument text as streamed (JSON, possibly invalid or doubly encoded). */
  arguments: string
}

/**
 * A part of a user message with more than text. An image's bytes (`data`, base64) are loaded just
 * before the call; until then `path` names it in the conversation's files (and the prompt's size
 * counts it as `imageTokens`, not as its bytes).
 */
export type UserContentPart =
  { type: 'text'; text: string } | { type: 'image'; mediaType: string; path: string; data?: string } | DocumentPart

/**
 * A document of a user message (docs/guides/agent-runs.md#files-in-messages): its extracted `text`
 * always; a PDF kept as a file also by `path`, its bytes (`data`, base64) loaded before the call and
 * sent natively to a model that declares `pdf` — every other model reads the text.
 */
export interface DocumentPart {
  type: 'file'
  filename: string
  mediaType: string
  text: string
  path?: string
  data?: string
}

/** A document as text, for a model that does not read it natively. */
export function documentText(part: Pick<DocumentPart, 'filename' | 'text'>): string {
  const text = part.text.replaceAll('</document>', '<\\/document>')
  return `<document name=${JSON.stringify(part.filename)}>\n${text}\n</document>`
}

export type ModelMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string | UserContentPart[] }
  | { role: 'assistant'; content: string | null; toolCalls?: ModelToolCall[] }
  | { role: 'tool'; toolCallId: string; content: string }

export interface ModelTool {
  name: string
  description: string
  parameters: ToolParameters
}

/** A model call's token counts, as the provider reported them. */
export interface Usage {
  /** The whole prompt, cached input included. */
  inputTokens: number
  /** Everything written, reasoning included. */
  outputTokens: number
  /** Of the input, what the provider read from its prompt cache (when it says). */
  cachedInputTokens?: number
  /** Of the output, what was spent reasoning (when it says). */
  reasoningTokens?: number
}

/** What a model stream yields, in order. Tool calls arrive complete (fragments already joined). */
export type StreamPart =
  | { type: 'text-delta'; text: string }
  | { type: 'tool-call'; call: ModelToolCall }
  | { type: 'usage'; usage: Usage }
  | { type: 'finish'; reason: string | null }

/** Sampling parameters of a request; unset ones are left to the model's configuration or the provider. */
export interface ModelParams {
  temperature?: number
  maxTokens?: number
  topP?: number
  /** Stop sequences. */
  stop?: string[]
}

export interface ModelRequest {
  messages: ModelMessage[]
  /** Omitted upstream when empty (OpenAI rejects `tools: []`). */
  tools: ModelTool[]
  /** Override the configured parameters for this request. */
  params?: ModelParams
  /**
   * The answer must be JSON following this schema: sent natively where the provider has it (OpenAI's
   * `response_format: json_schema`); others get only the prompt's instructions.
   */
  responseFormat?: { name: string; schema: ToolParameters; strict: boolean }
  signal?: AbortSignal
}

/** What a model takes besides text (`models[].capabilities`). */
export type ModelCapability = 'vision' | 'pdf'

/**
 * Bounds on one call to an upstream (`llmIdleTimeoutMs`, `llmCallTimeoutMs`, `llmMaxAnswerBytes`): a
 * silent, endless or flooding upstream fails the call instead of holding a slot or the server's memory.
 */
export interface UpstreamLimits {
  /** Abort when the upstream sends nothing for this long. */
  idleTimeoutMs?: number
  /** Abort when the whole call takes longer. */
  callTimeoutMs?: number
  /** Abort past this many bytes of the answer as received. */
  maxAnswerBytes?: number
}

/** The bounds a provider adapter applies when it is given none. */
export const defaultUpstreamLimits = {
  idleTimeoutMs: 60_000,
  callTimeoutMs: 15 * 60_000,
  maxAnswerBytes: 64 * 1024 * 1024,
} as const satisfies Required<UpstreamLimits>

/** Bounds on one model answer, whatever its provider (`llmMaxOutputChars`, `llmMaxToolCalls`). */
export interface AnswerLimits {
  /** Characters of text and tool-call arguments together. */
  maxOutputChars: number
  /** Tool calls in one answer. */
  maxToolCalls: number
}

/** More than any model's output-token limit makes (≈ 500k tokens), and more parallel calls than any asks for. */
export const defaultAnswerLimits: AnswerLimits = { maxOutputChars: 2_000_000, maxToolCalls: 128 }

/** A configured model. */
export interface LanguageModel {
  readonly id: string
  readonly provider: 'openai' | 'anthropic' | 'scripted'
  readonly supportsTools: boolean
  /** Images (`vision`) or PDF documents (`pdf`) in messages; absent: text only. */
  readonly capabilities?: readonly ModelCapability[]
  readonly contextWindow: number
  /** Streams one model turn. Throws ModelError for upstream failures. */
  stream(request: ModelRequest): AsyncIterable<StreamPart>
}

export type ModelErrorCode =
  | 'tools_unsupported'
  | 'upstream_error'
  | 'upstream_auth_missing'
  | 'timeout'
  | 'cancelled'
  /** The answer passed a limit on what one call may bring (bytes, characters, tool calls). */
  | 'output_too_large'

/** An upstream failure, with what the run manager needs to decide on a retry. */
export class ModelError extends Error {
  readonly code: ModelErrorCode
  readonly upstreamStatus?: number
  /** 429, 5xx and connection failures may be retried when nothing was streamed yet. */
  readonly isRetryable: boolean
  /** From a `Retry-After` header. */
  readonly retryAfterMs?: number
  /** What the upstream had reported using before the call failed (it is billed all the same). */
  readonly usage?: Usage

  constructor(
    code: ModelErrorCode,
    message: string,
    options: {
      upstreamStatus?: number
      isRetryable?: boolean
      retryAfterMs?: number
      usage?: Usage
      cause?: unknown
    } = {},
  ) {
    super(message, { cause: options.cause })
    this.name = 'ModelError'
    this.code = code
    this.upstreamStatus = options.upstreamStatus
    this.isRetryable = options.isRetryable ?? false
    this.retryAfterMs = options.retryAfterMs
    if (options.usage) this.usage = options.usage
  }

  /** The same error with other options (a scrubbed message, the usage reported before it). */
  with(changes: { message?: string; usage?: Usage; cause?: unknown }): ModelError {
    return new ModelError(this.code, changes.message ?? this.message, {
      upstreamStatus: this.upstreamStatus,
      isRetryable: this.isRetryable,
      retryAfterMs: this.retryAfterMs,
      usage: changes.usage ?? this.usage,
      cause: 'cause' in changes ? changes.cause : this.cause,
    })
  }
}
