import { ModelError, type StreamPart, type Usage } from '../model.js'
import { asRecord } from './safe-json.js'

interface PendingToolCall {
  id: string | undefined
  name: string | undefined
  arguments: string
}

/**
 * Turns chat-completions stream chunks (already JSON-parsed) into canonical stream parts. Pure: feed it
 * chunks with `push`, then call `finish` once the stream ended (`[DONE]` or connection close).
 *
 * - Text deltas are emitted as they come.
 * - `delta.tool_calls[]` fragments are joined by `index`: `id` and `function.name` from the first fragment
 *   that has them, `function.arguments` concatenated (parallel calls may interleave). Complete calls are
 *   emitted by `finish`, in index order, followed by usage (when the server sent any) and the finish part.
 * - `finish_reason` is only remembered: frames after it (e.g. a usage chunk with empty `choices`) still count.
 * - Unknown fields and chunks of an unexpected shape are ignored; a chunk carrying `error` throws a
 *   retryable ModelError (whether a retry is still possible is the caller's call).
 */
export class OpenAIStreamParser {
  readonly #toolCalls = new Map<number, PendingToolCall>()
  /** An upstream index reused by a call with another id (Ollama's parallel calls) → the slot it now means. */
  readonly #movedIndexes = new Map<number, number>()
  #lastToolCallIndex: number | undefined
  #usage: Usage | undefined
  #finishReason: string | null = null

  /** What the stream reported using so far (also when it then fails). */
  get usage(): Usage | undefined {
    return this.#usage
  }

  /** True once a choice said why it finished: the answer is whole even without `[DONE]`. */
  get isFinished(): boolean {
    return this.#finishReason !== null
  }

  /** Parts this chunk completes right away (text deltas). */
  push(chunk: unknown): StreamPart[] {
    const record = asRecord(chunk)
    if (!record) return []
    if (record.error !== undefined && record.error !== null) throw streamedError(record.error)
    this.#readUsage(record.usage)
    const parts: StreamPart[] = []
    const choices = Array.isArray(record.choices) ? record.choices : []
    for (const item of choices) {
      const choice = asRecord(item)
      // Only the first choice is ours (we never ask for `n` > 1).
      if (!choice || (typeof choice.index === 'number' && choice.index !== 0)) continue
      if (typeof choice.finish_reason === 'string') this.#finishReason = choice.finish_reason
      // Some servers put usage on the choice.
      this.#readUsage(choice.usage)
      const delta = asRecord(choice.delta) ?? asRecord(choice.message)
      if (!delta) continue
      if (typeof delta.content === 'string' && delta.content !== '')
        parts.push({ type: 'text-delta', text: delta.content })
      if (typeof delta.refusal === 'string' && delta.refusal !== '')
        parts.push({ type: 'text-delta', text: delta.refusal })
      if (Array.isArray(delta.tool_calls)) for (const fragment of delta.tool_calls) this.#addToolCallFragment(fragment)
    }
    return parts
  }

  /** Everything held back until the end: complete tool calls, usage, then `finish`. */
  finish(): StreamPart[] {
    const parts: StreamPart[] = []
    const indexes = [...this.#toolCalls.keys()].sort((a, b) => a - b)
    for (const index of indexes) {
      const call = this.#toolCalls.get(index)
      // A call without a name cannot be dispatched or answered; nothing was recorded for it.
      if (!call?.name) continue
      parts.push({
        type: 'tool-call',
        call: { id: call.id ?? `call_${index}`, name: call.name, arguments: call.arguments },
      })
    }
    if (this.#usage) parts.push({ type: 'usage', usage: this.#usage })
    parts.push({ type: 'finish', reason: this.#finishReason })
    return parts
  }

  #addToolCallFragment(value: unknown): void {
    const fragment = asRecord(value)
    if (!fragment) return
    const id = typeof fragment.id === 'string' && fragment.id !== '' ? fragment.id : undefined
    const fn = asRecord(fragment.function)
    const index = this.#indexOf(fragment.index, id, typeof fn?.name === 'string' && fn.name !== '')
    this.#lastToolCallIndex = index
    let call = this.#toolCalls.get(index)
    if (!call) {
      call = { id: undefined, name: undefined, arguments: '' }
      this.#toolCalls.set(index, call)
    }
    call.id ??= id
    if (!fn) return
    if (call.name === undefined && typeof fn.name === 'string' && fn.name !== '') call.name = fn.name
    if (typeof fn.arguments === 'string') call.arguments += fn.arguments
    // A few servers send arguments as an object rather than JSON text.
    else if (asRecord(fn.arguments)) call.arguments += JSON.stringify(fn.arguments)
  }

  /**
   * The slot of a fragment: its `index`, else (servers that omit it) the call with its id or a new one.
   * Some servers send every call at index 0: a fragment with another id and a name, at an index whose
   * call is already whole (named, its arguments complete JSON), starts a new call, and the index's later
   * fragments go to that one.
   */
  #indexOf(index: unknown, id: string | undefined, named: boolean): number {
    if (typeof index === 'number' && Number.isInteger(index)) {
      const slot = this.#movedIndexes.get(index) ?? index
      const held = this.#toolCalls.get(slot)
      if (id === undefined || !named || !held?.id || held.id === id || !held.name || !isWholeJson(held.arguments))
        return slot
      const moved = this.#slotOf(id)
      this.#movedIndexes.set(index, moved)
      return moved
    }
    if (id !== undefined) return this.#slotOf(id)
    return this.#lastToolCallIndex ?? 0
  }

  /** The slot of the call with this id, or a new one after every other. */
  #slotOf(id: string): number {
    for (const [slot, call] of this.#toolCalls) if (call.id === id) return slot
    return this.#toolCalls.size === 0 ? 0 : Math.max(...this.#toolCalls.keys()) + 1
  }

  #readUsage(value: unknown): void {
    const usage = asRecord(value)
    if (!usage) return
    const input = usage.prompt_tokens
    const output = usage.completion_tokens
    if (typeof input !== 'number' && typeof output !== 'number') return
    // OpenAI's details (also sent by compatible servers): cached prompt tokens, reasoning tokens.
    const cached = asRecord(usage.prompt_tokens_details)?.cached_tokens
    const reasoning = asRecord(usage.completion_tokens_details)?.reasoning_tokens
    const previous = this.#usage
    this.#usage = {
      inputTokens: typeof input === 'number' ? input : (previous?.inputTokens ?? 0),
      outputTokens: typeof output === 'number' ? output : (previous?.outputTokens ?? 0),
      ...(typeof cached === 'number'
        ? { cachedInputTokens: cached }
        : previous?.cachedInputTokens !== undefined && { cachedInputTokens: previous.cachedInputTokens }),
      ...(typeof reasoning === 'number'
        ? { reasoningTokens: reasoning }
        : previous?.reasoningTokens !== undefined && { reasoningTokens: previous.reasoningTokens }),
    }
  }
}

function isWholeJson(text: string): boolean {
  try {
    JSON.parse(text)
    return true
  } catch {
    return false
  }
}

function streamedError(value: unknown): ModelError {
  const error = asRecord(value)
  const message =
    typeof error?.message === 'string' ? error.message : typeof value === 'string' ? value : 'unknown error'
  return new ModelError('upstream_error', `The upstream reported an error mid-stream: ${message.slice(0, 500)}`, {
    isRetryable: true,
  })
}
