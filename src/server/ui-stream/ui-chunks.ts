import type { EventRecord, JsonValue } from '../../store/index.js'

/**
 * A part of the AI SDK's UI message stream (protocol v1, AI SDK 6): the subset Plinth sends. Its
 * shape is the `ai` package's `UIMessageChunk` (docs/ui-stream.md).
 */
export type UiChunk =
  | { type: 'start'; messageId: string; messageMetadata?: { runId: string; conversationId: string } }
  | { type: 'start-step' }
  | { type: 'finish-step' }
  | { type: 'text-start'; id: string }
  | { type: 'text-delta'; id: string; delta: string }
  | { type: 'text-end'; id: string }
  | {
      type: 'tool-input-available'
      toolCallId: string
      toolName: string
      input: JsonValue
      dynamic: true
      providerExecuted: boolean
    }
  | { type: 'tool-approval-request'; approvalId: string; toolCallId: string }
  | { type: 'tool-output-available'; toolCallId: string; output: JsonValue; dynamic: true; providerExecuted: boolean }
  | { type: 'tool-output-error'; toolCallId: string; errorText: string; dynamic: true; providerExecuted: boolean }
  | { type: 'tool-output-denied'; toolCallId: string }
  | { type: 'finish'; finishReason: 'stop' | 'tool-calls' }
  | { type: 'error'; errorText: string }
  | { type: 'abort'; reason: string }

/** A part as one SSE frame of the UI message stream. */
export function uiChunkFrame(chunk: UiChunk): string {
  return `data: ${JSON.stringify(chunk)}\n\n`
}

/** Where a stream of one run ends: at its terminal event, or where it waits for an answer. */
export interface StreamEnd {
  /** The run's `requires_action` status event to end at (the run waits there now), or null. */
  waitingAt: number | null
  /** Events after this id are live: a `requires_action` among them ends the stream. */
  liveAfter: number
  /**
   * Decisions and client-tool calls this request answers. Answering several writes a `requires_action`
   * between each (still waiting for the rest): those wait for nothing the client must give.
   */
  answered?: ReadonlySet<string>
}

/**
 * Turns one run's events, in log order, into UI message stream parts: the run is one assistant
 * message (id = the run id), each model round a step, the model's text a text part, each tool call a
 * dynamic tool part (`providerExecuted` for Plinth's own commands; a client tool's is the client's to
 * run), a decision an approval request. The stream ends where the run ends or waits for an answer.
 */
export class UiChunkMapper {
  readonly #end: StreamEnd
  #stepOpen = false
  #textOpen: string | null = null
  readonly #roles = new Map<string, string>()
  readonly #streamed = new Set<string>()
  /** Tool calls by id: whether Plinth runs them (a command) or the client does. */
  readonly #executed = new Map<string, boolean>()

  /** Client-tool calls answered by the client in this request: it shows their outputs as it set them. */
  readonly #clientAnswered: ReadonlySet<string>

  constructor(end: StreamEnd, clientAnswered: ReadonlySet<string> = new Set()) {
    this.#end = end
    this.#clientAnswered = clientAnswered
  }

  /** The parts for one event, and whether the stream ends with it. */
  map(event: EventRecord): { chunks: UiChunk[]; end: boolean } {
    const data = event.data as { [key: string]: JsonValue }
    const chunks: UiChunk[] = []
    switch (event.type) {
      case 'round.started':
        this.#closeStep(chunks)
        chunks.push({ type: 'start-step' })
        this.#stepOpen = true
        break
      case 'message.created':
        this.#roles.set(String(data.messageId), String(data.role))
        break
      case 'message.delta': {
        const id = String(data.messageId)
        if (this.#roles.get(id) !== 'assistant' || typeof data.text !== 'string' || data.text === '') break
        this.#openText(chunks, id)
        chunks.push({ type: 'text-delta', id, delta: data.text })
        this.#streamed.add(id)
        break
      }
      case 'message.completed': {
        const id = String(data.messageId)
        if (this.#roles.get(id) !== 'assistant') break
        // A model that did not stream still has its text shown, once.
        if (!this.#streamed.has(id) && typeof data.content === 'string' && data.content !== '') {
          this.#openText(chunks, id)
          chunks.push({ type: 'text-delta', id, delta: data.content })
          this.#streamed.add(id)
        }
        this.#closeText(chunks)
        break
      }
      case 'tool_call.created': {
        const callId = String(data.callId)
        const executed = data.kind !== 'client'
        this.#executed.set(callId, executed)
        this.#closeText(chunks)
        chunks.push({
          type: 'tool-input-available',
          toolCallId: callId,
          toolName: String(data.name),
          input: data.args ?? null,
          dynamic: true,
          providerExecuted: executed,
        })
        break
      }
      case 'decision.required':
        if (typeof data.callId === 'string')
          chunks.push({ type: 'tool-approval-request', approvalId: String(data.decisionId), toolCallId: data.callId })
        break
      case 'tool_call.completed': {
        const callId = String(data.callId)
        // Sending it back would turn the client's own part (an output-error, say) into a server result.
        if (this.#clientAnswered.has(callId)) break
        const providerExecuted = this.#executed.get(callId) ?? true
        if (data.status === 'ok')
          chunks.push({
            type: 'tool-output-available',
            toolCallId: callId,
            output: data.output ?? null,
            dynamic: true,
            providerExecuted,
          })
        else if (data.status === 'rejected') chunks.push({ type: 'tool-output-denied', toolCallId: callId })
        else
          chunks.push({
            type: 'tool-output-error',
            toolCallId: callId,
            errorText: `${String(data.status)}: ${describe(data.output)}`,
            dynamic: true,
            providerExecuted,
          })
        break
      }
      case 'run.status':
        // The run waits for an answer: the stream ends so the client can give it (a status update
        // once everything asked is answered waits for nothing).
        if (
          data.status === 'requires_action' &&
          waitsForSomething(data.requiredAction, this.#end.answered) &&
          (event.id === this.#end.waitingAt || event.id > this.#end.liveAfter)
        ) {
          this.#finish(chunks, 'tool-calls')
          return { chunks, end: true }
        }
        break
      case 'run.completed':
        this.#finish(chunks, 'stop')
        return { chunks, end: true }
      case 'run.failed': {
        const error = data.error as { code?: string; message?: string } | null
        this.#closeText(chunks)
        chunks.push({ type: 'error', errorText: `${error?.code ?? 'failed'}: ${error?.message ?? 'the run failed'}` })
        return { chunks, end: true }
      }
      case 'run.cancelled':
        this.#closeText(chunks)
        chunks.push({ type: 'abort', reason: typeof data.reason === 'string' ? data.reason : 'cancelled' })
        return { chunks, end: true }
      case 'run.expired':
        this.#closeText(chunks)
        chunks.push({ type: 'error', errorText: 'expired: the run waited too long for an answer' })
        return { chunks, end: true }
    }
    return { chunks, end: false }
  }

  #openText(chunks: UiChunk[], id: string): void {
    if (this.#textOpen === id) return
    this.#closeText(chunks)
    chunks.push({ type: 'text-start', id })
    this.#textOpen = id
  }

  #closeText(chunks: UiChunk[]): void {
    if (this.#textOpen === null) return
    chunks.push({ type: 'text-end', id: this.#textOpen })
    this.#textOpen = null
  }

  #closeStep(chunks: UiChunk[]): void {
    this.#closeText(chunks)
    if (!this.#stepOpen) return
    chunks.push({ type: 'finish-step' })
    this.#stepOpen = false
  }

  #finish(chunks: UiChunk[], finishReason: 'stop' | 'tool-calls'): void {
    this.#closeStep(chunks)
    chunks.push({ type: 'finish', finishReason })
  }
}

function waitsForSomething(action: JsonValue | undefined, answered: ReadonlySet<string> = new Set()): boolean {
  if (!action || typeof action !== 'object' || Array.isArray(action)) return true
  const pending = (list: JsonValue | undefined, key: string): number =>
    Array.isArray(list)
      ? list.filter((item) => {
          const id = item && typeof item === 'object' && !Array.isArray(item) ? item[key] : undefined
          return typeof id !== 'string' || !answered.has(id)
        }).length
      : 0
  return pending(action.decisions, 'decisionId') + pending(action.toolOutputs, 'callId') > 0
}

function describe(output: JsonValue | undefined): string {
  if (typeof output === 'string') return output
  if (output && typeof output === 'object' && !Array.isArray(output) && typeof output.message === 'string')
    return output.message
  return JSON.stringify(output ?? null)
}
