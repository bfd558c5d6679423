import type { LanguageModel, ModelRequest, StreamPart, ModelCapability } from '../model.js'

/** One scripted model turn: text (streamed in chunks) and/or tool calls. */
export interface ScriptedTurn {
  text?: string
  toolCalls?: Array<{ name: string; arguments: unknown; id?: string }>
  /** Split the text into this many chunks (default: one chunk per word). */
  chunks?: number
  /** Milliseconds between chunks (default 0). */
  delayMs?: number
  /** Emit the tool calls even when the request offers no tools (a model that ignores that). */
  evenWithoutTools?: boolean
}

export interface ScriptedModelOptions {
  id: string
  turns: ScriptedTurn[]
  contextWindow?: number
  supportsTools?: boolean
  /** What it takes besides text (default: images and PDFs, so tests can send them). */
  capabilities?: readonly ModelCapability[]
  /** When the script runs out: repeat from the start (demos) or answer a fixed text. */
  whenExhausted?: 'loop' | 'say-done'
  /**
   * `call` (default): the next turn per model call. `round`: the turn numbered by the tool rounds since
   * the last user message in the request — the same answer for the same history, even after a restart.
   */
  turnBy?: 'call' | 'round'
}

/**
 * A deterministic provider that replays a script of turns through the same streaming path as real
 * providers, and records the requests it got (tests read `calls`).
 */
export class ScriptedModel implements LanguageModel {
  readonly id: string
  readonly provider = 'scripted' as const
  readonly supportsTools: boolean
  readonly capabilities: readonly ModelCapability[]
  readonly contextWindow: number
  readonly calls: ModelRequest[] = []
  readonly #turns: ScriptedTurn[]
  readonly #whenExhausted: 'loop' | 'say-done'
  readonly #turnBy: 'call' | 'round'
  #next = 0

  constructor(options: ScriptedModelOptions) {
    this.id = options.id
    this.#turns = [...options.turns]
    this.supportsTools = options.supportsTools ?? true
    this.capabilities = options.capabilities ?? ['vision', 'pdf']
    this.contextWindow = options.contextWindow ?? 128_000
    this.#whenExhausted = options.whenExhausted ?? 'say-done'
    this.#turnBy = options.turnBy ?? 'call'
  }

  /** Replaces the script and starts again from its first turn (tests reuse one model). */
  setTurns(turns: ScriptedTurn[]): void {
    this.#turns.splice(0, this.#turns.length, ...turns)
    this.#next = 0
  }

  async *stream(request: ModelRequest): AsyncGenerator<StreamPart> {
    this.calls.push({ messages: structuredClone(request.messages), tools: structuredClone(request.tools) })
    if (this.#turnBy === 'round') {
      // The person's last message (not the images that follow tool results).
      const lastUser = request.messages.findLastIndex(
        (message, index) => message.role === 'user' && request.messages[index - 1]?.role !== 'tool',
      )
      this.#next = request.messages
        .slice(lastUser + 1)
        .filter((message) => message.role === 'assistant' && (message.toolCalls?.length ?? 0) > 0).length
    }
    let turn = this.#turns[this.#next]
    if (!turn && this.#whenExhausted === 'loop' && this.#turns.length > 0) {
      this.#next = 0
      turn = this.#turns[0]
    }
    this.#next++
    turn ??= { text: 'Done.' }
    // A tool-less request (the final turn at the iteration cap) gets text only, unless scripted otherwise.
    const toolCalls = request.tools.length > 0 || turn.evenWithoutTools ? (turn.toolCalls ?? []) : []
    const text = turn.text ?? (toolCalls.length === 0 ? 'Done.' : '')
    for (const piece of split(text, turn.chunks)) {
      if (request.signal?.aborted) return
      if (turn.delayMs) await sleep(turn.delayMs, request.signal)
      yield { type: 'text-delta', text: piece }
    }
    let index = 0
    for (const call of toolCalls) {
      const id = call.id ?? `call_${this.#next}_${index++}`
      yield {
        type: 'tool-call',
        call: {
          id,
          name: call.name,
          arguments: typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments ?? {}),
        },
      }
    }
    yield { type: 'usage', usage: { inputTokens: estimate(request), outputTokens: Math.ceil(text.length / 4) } }
    yield { type: 'finish', reason: toolCalls.length > 0 ? 'tool_calls' : 'stop' }
  }
}

function split(text: string, chunks: number | undefined): string[] {
  if (!text) return []
  if (!chunks) return text.match(/\S+\s*|\s+/g) ?? [text]
  const size = Math.ceil(text.length / chunks)
  const pieces: string[] = []
  for (let start = 0; start < text.length; start += size) pieces.push(text.slice(start, start + size))
  return pieces
}

function estimate(request: ModelRequest): number {
  return Math.ceil(JSON.stringify(request.messages).length / 4)
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const onAbort = (): void => {
      clearTimeout(timer)
      resolve()
    }
    // The listener goes when the sleep ends: a long stream must not pile them up on the run's signal.
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}
