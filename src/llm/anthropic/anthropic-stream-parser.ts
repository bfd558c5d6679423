import { ModelError, type StreamPart, type Usage } from '../model.js'
import { asRecord } from '../openai/safe-json.js'
import { mapAnthropicStopReason } from './map-anthropic-stop-reason.js'

interface ToolUseBlock {
  id: string
  name: string
  /** `input` from `content_block_start` (used when no `input_json_delta` follows). */
  startInput: unknown
  partialJson: string
}

/** Error types of an `error` event that a later retry may get past. */
const retryableErrorTypes = new Set(['overloaded_error', 'api_error', 'rate_limit_error', 'timeout_error'])

/**
 * Turns Messages API stream events (already JSON-parsed `data`) into canonical stream parts. Pure: feed
 * events with `push`, then call `finish`.
 *
 * - `text_delta` → text parts right away;
 * - `content_block_start` of type `tool_use` opens a call; its `input_json_delta.partial_json` fragments
 *   are joined per block index; complete calls are emitted by `finish` in block order;
 * - usage comes from `message_start` (input, cache reads and writes included) and `message_delta`
 *   (cumulative output); `message_delta.delta.stop_reason` is the finish reason;
 * - an `error` event throws a ModelError (retryable for overload/API/rate-limit errors);
 * - thinking blocks, pings and unknown events are ignored.
 */
export class AnthropicStreamParser {
  readonly #toolUses = new Map<number, ToolUseBlock>()
  #inputTokens: number | undefined
  #outputTokens: number | undefined
  #cachedTokens: number | undefined
  #stopReason: string | null = null
  #isStopped = false

  /** What the stream reported using so far (also when it then fails). */
  get usage(): Usage | undefined {
    if (this.#inputTokens === undefined && this.#outputTokens === undefined) return undefined
    return {
      inputTokens: this.#inputTokens ?? 0,
      outputTokens: this.#outputTokens ?? 0,
      ...(this.#cachedTokens !== undefined && { cachedInputTokens: this.#cachedTokens }),
    }
  }

  /** True once `message_stop` arrived. */
  get isStopped(): boolean {
    return this.#isStopped
  }

  /** True once the message said why it stopped (`message_delta.stop_reason` or `message_stop`). */
  get isComplete(): boolean {
    return this.#isStopped || this.#stopReason !== null
  }

  /** Parts this event completes right away (text deltas). `eventName` is the SSE `event:` field. */
  push(data: unknown, eventName?: string): StreamPart[] {
    const event = asRecord(data)
    if (!event) return []
    const type = typeof event.type === 'string' ? event.type : eventName
    switch (type) {
      case 'message_start':
        this.#readUsage(asRecord(event.message)?.usage)
        return []
      case 'content_block_start': {
        const block = asRecord(event.content_block)
        if (typeof event.index === 'number' && block?.type === 'tool_use' && typeof block.name === 'string') {
          this.#toolUses.set(event.index, {
            id: typeof block.id === 'string' ? block.id : `toolu_${event.index}`,
            name: block.name,
            startInput: block.input,
            partialJson: '',
          })
        }
        // A server may open a text block with its first text already in it.
        if (block?.type === 'text' && typeof block.text === 'string' && block.text !== '')
          return [{ type: 'text-delta', text: block.text }]
        return []
      }
      case 'content_block_delta': {
        const delta = asRecord(event.delta)
        if (delta?.type === 'text_delta' && typeof delta.text === 'string' && delta.text !== '')
          return [{ type: 'text-delta', text: delta.text }]
        if (
          delta?.type === 'input_json_delta' &&
          typeof delta.partial_json === 'string' &&
          typeof event.index === 'number'
        ) {
          const toolUse = this.#toolUses.get(event.index)
          if (toolUse) toolUse.partialJson += delta.partial_json
        }
        return []
      }
      case 'message_delta': {
        const stopReason = asRecord(event.delta)?.stop_reason
        if (typeof stopReason === 'string') this.#stopReason = stopReason
        this.#readUsage(event.usage)
        return []
      }
      case 'message_stop':
        this.#isStopped = true
        return []
      case 'error':
        throw streamedError(event.error)
      default:
        // content_block_stop, ping, and whatever a later API version adds.
        return []
    }
  }

  /** Complete tool calls, usage, then `finish`. */
  finish(): StreamPart[] {
    const parts: StreamPart[] = []
    for (const index of [...this.#toolUses.keys()].sort((a, b) => a - b)) {
      const toolUse = this.#toolUses.get(index)
      if (!toolUse) continue
      parts.push({ type: 'tool-call', call: { id: toolUse.id, name: toolUse.name, arguments: argumentsOf(toolUse) } })
    }
    const usage = this.usage
    if (usage) parts.push({ type: 'usage', usage })
    parts.push({ type: 'finish', reason: mapAnthropicStopReason(this.#stopReason) })
    return parts
  }

  #readUsage(value: unknown): void {
    const usage = asRecord(value)
    if (!usage) return
    const counts = [usage.input_tokens, usage.cache_creation_input_tokens, usage.cache_read_input_tokens].filter(
      (count): count is number => typeof count === 'number',
    )
    // `input_tokens` excludes cached tokens; the prompt is all three together. A later event may repeat
    // only some of the counts, so it never lowers the total.
    if (counts.length > 0)
      this.#inputTokens = Math.max(
        this.#inputTokens ?? 0,
        counts.reduce((sum, count) => sum + count, 0),
      )
    if (typeof usage.output_tokens === 'number') this.#outputTokens = usage.output_tokens
    if (typeof usage.cache_read_input_tokens === 'number')
      this.#cachedTokens = Math.max(this.#cachedTokens ?? 0, usage.cache_read_input_tokens)
  }
}

/** The raw argument text: the joined fragments, else the start block's input, else `{}`. */
function argumentsOf(toolUse: ToolUseBlock): string {
  if (toolUse.partialJson !== '') return toolUse.partialJson
  const input = asRecord(toolUse.startInput)
  return input && Object.keys(input).length > 0 ? JSON.stringify(input) : '{}'
}

function streamedError(value: unknown): ModelError {
  const error = asRecord(value)
  const type = typeof error?.type === 'string' ? error.type : 'error'
  const message = typeof error?.message === 'string' ? error.message.slice(0, 500) : 'unknown error'
  return new ModelError('upstream_error', `The upstream reported ${type} mid-stream: ${message}`, {
    isRetryable: retryableErrorTypes.has(type),
  })
}
