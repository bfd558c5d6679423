import {
  EventType,
  PROTOCOL_VERSION,
  type Event as AgUiEvent,
  type RunFinishedOutcome,
  type TokenUsage,
} from '@ag-ui/core'
import type { EventRecord } from '../../store/index.js'
import { interruptsOf, waitingWorkOf, type ClientToolRisk, type DecisionDetails } from './interrupts.js'

export type { AgUiEvent }

export interface MapperSetup {
  /** The conversation id. */
  threadId: string
  /** The AG-UI run id (the client's, from the input). */
  runId: string
  /** The Plinth run this stream follows. */
  plinthRunId: string
  model: string
  /** Continuing a waiting run: the round in progress, whose step is opened again. */
  continuesRound?: number
  /** Decision and call ids this request answers: a wait that lists only these is not an interrupt. */
  answering?: ReadonlySet<string>
  /** Calls the client answered with tool messages: their results are not sent back to it. */
  answeredByClient?: ReadonlySet<string>
  /** The run's usage when the stream began (an AG-UI run reports only the calls it made). */
  usageBefore?: { inputTokens: number; outputTokens: number }
}

interface StoredCall {
  callId: string
  arguments: string
}

/**
 * Turns one Plinth run's events (its durable log) into AG-UI events, in order: a round is a step,
 * an assistant message's deltas are a text message, each tool call is START/ARGS/END and its
 * completion a TOOL_CALL_RESULT; the run ends with RUN_FINISHED (success, cancelled, or interrupt
 * when it waits for a person or a client tool) or RUN_ERROR. docs/ag-ui.md has the table.
 */
export class AgUiEventMapper {
  readonly #setup: MapperSetup
  #openText: string | null = null
  #assistantMessage: string | null = null
  /** Assistant messages of the run (its user message is in the log too, and the client already has it). */
  readonly #assistantMessages = new Set<string>()
  #step: string | null = null
  readonly #rawArguments = new Map<string, string>()
  readonly #decisions = new Map<string, DecisionDetails>()
  readonly #clientRisks = new Map<string, ClientToolRisk>()
  #done = false

  constructor(setup: MapperSetup) {
    this.#setup = setup
  }

  /** True once RUN_FINISHED or RUN_ERROR went out: the stream ends. */
  get done(): boolean {
    return this.#done
  }

  /** What opens the stream: RUN_STARTED (with Plinth's run id in its metadata), the continued round's step. */
  start(): AgUiEvent[] {
    const { threadId, runId, plinthRunId, continuesRound } = this.#setup
    const events: AgUiEvent[] = [
      {
        type: EventType.RUN_STARTED,
        threadId,
        runId,
        protocolVersion: PROTOCOL_VERSION,
        metadata: { plinth: { runId: plinthRunId } },
      },
    ]
    if (continuesRound !== undefined && continuesRound > 0) events.push(this.#openStep(continuesRound))
    return events
  }

  map(event: EventRecord): AgUiEvent[] {
    if (this.#done) return []
    const data = event.data as Record<string, unknown>
    switch (event.type) {
      case 'round.started':
        return [...this.#closeText(), ...this.#closeStep(), this.#openStep(Number(data.iteration))]
      case 'message.created':
        if (data.role === 'assistant') {
          this.#assistantMessage = String(data.messageId)
          this.#assistantMessages.add(this.#assistantMessage)
        }
        return []
      case 'message.delta':
        return this.#assistantMessages.has(String(data.messageId))
          ? this.#text(String(data.messageId), String(data.text ?? ''))
          : []
      case 'message.completed':
        return this.#assistantMessages.has(String(data.messageId))
          ? this.#messageCompleted(String(data.messageId), data.content, data.toolCalls)
          : []
      case 'tool_call.created': {
        // A client tool's evaluated risk (and, for a proposed command, the rules it matched): the
        // client runs it, so the client is the one to warn.
        const client =
          data.kind === 'client'
            ? { risk: (data.risk as string | null | undefined) ?? null, matchedRules: data.matchedRules ?? [] }
            : undefined
        if (client) this.#clientRisks.set(String(data.callId), client)
        return this.#toolCall(String(data.callId), String(data.name), data.args, client)
      }
      case 'tool_call.completed':
        return this.#toolResult(String(data.callId), data.status, data.output)
      case 'tool_call.output':
        return [
          {
            type: EventType.CUSTOM,
            name: 'plinth.tool_output',
            value: { toolCallId: data.callId, stream: data.stream, text: data.text },
          },
        ]
      case 'decision.required':
        this.#decisions.set(String(data.decisionId), {
          preview: (data.preview as string | null | undefined) ?? null,
          expiresAt: String(data.expiresAt),
          reasons: (data.reasons as string[] | undefined) ?? [],
        })
        return []
      case 'run.status':
        return data.status === 'requires_action' ? this.#waiting(data.requiredAction) : []
      case 'run.completed':
        return this.#finish({ type: 'success' }, data.usage)
      case 'run.cancelled':
        return this.#finish({ type: 'cancelled' }, undefined, { reason: data.reason })
      case 'run.failed': {
        const error = (data.error ?? {}) as { code?: string; message?: string }
        return this.#error(error.code ?? 'failed', error.message ?? 'the run failed')
      }
      case 'run.expired':
        return this.#error('expired', 'the run waited longer than its action TTL for a decision or a client tool')
      default:
        return []
    }
  }

  /** The stream ends before the run does (the server stops, access went, an answer failed): RUN_ERROR. */
  fail(code: string, message: string): AgUiEvent[] {
    return this.#done ? [] : this.#error(code, message)
  }

  #text(messageId: string, text: string): AgUiEvent[] {
    if (text === '') return []
    const events: AgUiEvent[] = []
    if (this.#openText !== messageId) {
      events.push(...this.#closeText(), { type: EventType.TEXT_MESSAGE_START, messageId, role: 'assistant' })
      this.#openText = messageId
    }
    events.push({ type: EventType.TEXT_MESSAGE_CONTENT, messageId, delta: text })
    return events
  }

  #messageCompleted(messageId: string, content: unknown, toolCalls: unknown): AgUiEvent[] {
    for (const call of (toolCalls as StoredCall[] | null) ?? []) this.#rawArguments.set(call.callId, call.arguments)
    if (this.#openText === messageId) return this.#closeText()
    // Text that never streamed (a message completed in one piece) still reaches the client.
    if (typeof content === 'string' && content !== '') return [...this.#text(messageId, content), ...this.#closeText()]
    return []
  }

  #toolCall(callId: string, name: string, args: unknown, client?: ClientToolRisk): AgUiEvent[] {
    const raw = this.#rawArguments.get(callId) ?? JSON.stringify(args ?? {})
    this.#rawArguments.delete(callId)
    return [
      ...this.#closeText(),
      {
        type: EventType.TOOL_CALL_START,
        toolCallId: callId,
        toolCallName: name,
        ...(this.#assistantMessage && { parentMessageId: this.#assistantMessage }),
        ...(client && { metadata: { plinth: { kind: 'client', ...client } } }),
      },
      ...(raw === '' ? [] : [{ type: EventType.TOOL_CALL_ARGS, toolCallId: callId, delta: raw } as AgUiEvent]),
      { type: EventType.TOOL_CALL_END, toolCallId: callId },
    ]
  }

  #toolResult(callId: string, status: unknown, output: unknown): AgUiEvent[] {
    if (this.#setup.answeredByClient?.has(callId)) return []
    const content = typeof output === 'string' ? output : JSON.stringify(output ?? null)
    return [
      {
        type: EventType.TOOL_CALL_RESULT,
        messageId: `${callId}-result`,
        toolCallId: callId,
        role: 'tool',
        content,
        ...(status !== 'ok' && { metadata: { plinth: { status } } }),
      },
    ]
  }

  /** A wait ends the AG-UI run unless this request answers everything it lists. */
  #waiting(requiredAction: unknown): AgUiEvent[] {
    const answering = this.#setup.answering ?? new Set<string>()
    const work = waitingWorkOf(requiredAction)
    const decisions = work.decisions.filter((decision) => !answering.has(decision.decisionId))
    const toolOutputs = work.toolOutputs.filter((call) => !answering.has(call.callId))
    if (decisions.length === 0 && toolOutputs.length === 0) return []
    // Only frontend tools wait: AG-UI's own pattern, a finished run with pending tool calls that the
    // client answers with tool messages in its next input.
    if (decisions.length === 0)
      return this.#finish({ type: 'success', pendingToolCallIds: toolOutputs.map((call) => call.callId) }, undefined)
    return this.#finish(
      {
        type: 'interrupt',
        interrupts: interruptsOf(
          { decisions, toolOutputs },
          this.#decisions,
          this.#setup.plinthRunId,
          this.#clientRisks,
        ),
      },
      undefined,
    )
  }

  #finish(outcome: RunFinishedOutcome, usage: unknown, plinth: Record<string, unknown> = {}): AgUiEvent[] {
    this.#done = true
    const { threadId, runId, plinthRunId } = this.#setup
    const used = this.#usage(usage)
    return [
      ...this.#closeText(),
      ...this.#closeStep(),
      {
        type: EventType.RUN_FINISHED,
        threadId,
        runId,
        outcome,
        ...(used && { usage: used }),
        metadata: { plinth: { runId: plinthRunId, ...plinth } },
      },
    ]
  }

  #error(code: string, message: string): AgUiEvent[] {
    this.#done = true
    return [
      ...this.#closeText(),
      ...this.#closeStep(),
      { type: EventType.RUN_ERROR, code, message, metadata: { plinth: { runId: this.#setup.plinthRunId } } },
    ]
  }

  #usage(usage: unknown): TokenUsage[] | undefined {
    const total = usage as { inputTokens?: number; outputTokens?: number } | undefined
    if (typeof total?.inputTokens !== 'number' || typeof total.outputTokens !== 'number') return undefined
    const before = this.#setup.usageBefore ?? { inputTokens: 0, outputTokens: 0 }
    const inputTokens = Math.max(0, total.inputTokens - before.inputTokens)
    const outputTokens = Math.max(0, total.outputTokens - before.outputTokens)
    return [{ model: this.#setup.model, inputTokens, outputTokens, totalTokens: inputTokens + outputTokens }]
  }

  #openStep(round: number): AgUiEvent {
    this.#step = `round ${round}`
    return { type: EventType.STEP_STARTED, stepName: this.#step }
  }

  #closeStep(): AgUiEvent[] {
    if (this.#step === null) return []
    const stepName = this.#step
    this.#step = null
    return [{ type: EventType.STEP_FINISHED, stepName }]
  }

  #closeText(): AgUiEvent[] {
    if (this.#openText === null) return []
    const messageId = this.#openText
    this.#openText = null
    return [{ type: EventType.TEXT_MESSAGE_END, messageId }]
  }
}
