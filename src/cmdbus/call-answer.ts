import type { JsonValue } from '../extension/index.js'
import {
  insertToolMessageAfterFence,
  runEvent,
  toolCallResultAfterFence,
  type Executor,
  type FencedWrite,
  type MessagePart,
  type NewEvent,
  type Run,
  type ToolCallStatus,
} from '../store/index.js'
import type { DispatchOutcome } from './bus-types.js'
import { resultImages } from './exec-images.js'
import { capForModel } from './tool-output.js'

/** The run a call belongs to, as its rows and events name it. */
export type CallRun = Pick<Run, 'id' | 'conversationId' | 'projectId' | 'ownerId'>

/** How a call's result is rendered for the model. */
export interface AnswerOptions {
  /** The command's own rendering of an ok result (`modelText`); otherwise JSON. */
  modelText?: ((result: JsonValue) => string) | undefined
  /** At most this many bytes of it go to the model (PLINTH_TOOL_OUTPUT_LIMIT). */
  limitBytes: number
  durationMs: number | null
  dispatchId?: string | null
  repeatOf?: string
}

/**
 * A call's one terminal result (docs/architecture.md#the-tool-call-ledger): its ledger row, the text the
 * model reads, and its event.
 */
export interface CallAnswer {
  row: {
    status: ToolCallStatus
    output: JsonValue
    modelOutput: string
    modelTruncated: boolean
    dispatchId?: string | null
    repeatOf?: string
  }
  text: string
  /** Images the result names (an execution's plot, an MCP tool's image), kept with the tool message. */
  parts: MessagePart[]
  event: NewEvent
}

/** Renders a call's terminal result. */
export function callAnswer(
  run: CallRun,
  callId: string,
  status: ToolCallStatus,
  output: JsonValue,
  options: AnswerOptions,
): CallAnswer {
  const modelText = status === 'ok' ? options.modelText : undefined
  const text = modelText ? modelText(output) : typeof output === 'string' ? output : JSON.stringify(output)
  const capped = capForModel(text, options.limitBytes)
  return {
    row: {
      status,
      output,
      modelOutput: capped.text,
      modelTruncated: capped.truncated,
      ...(options.dispatchId !== undefined && { dispatchId: options.dispatchId }),
      ...(options.repeatOf !== undefined && { repeatOf: options.repeatOf }),
    },
    text: capped.text,
    parts: status === 'ok' ? resultImages(output).map((image): MessagePart => ({ type: 'image', ...image })) : [],
    event: runEvent(run, 'tool_call.completed', {
      callId,
      status,
      output,
      modelTruncated: capped.truncated,
      durationMs: options.durationMs,
      ...(options.repeatOf && { repeatOf: options.repeatOf }),
    }),
  }
}

/** An answer as writes and an event for a statement that carries the run's fence (written only if it holds). */
export function answerAfterFence(
  db: Executor,
  run: CallRun,
  callId: string,
  answer: CallAnswer,
  messageId?: string,
): { writes: FencedWrite[]; events: NewEvent[] } {
  return {
    writes: [
      toolCallResultAfterFence(db, callId, answer.row),
      insertToolMessageAfterFence(run, callId, answer.text, answer.parts, messageId),
    ],
    events: [answer.event],
  }
}

/** A dispatch's outcome as a call's terminal status and output; undefined while it waits for a decision. */
export function outcomeAnswer(outcome: DispatchOutcome): { status: ToolCallStatus; output: JsonValue } | undefined {
  if (outcome.status === 'succeeded') return { status: 'ok', output: outcome.result }
  if (outcome.status === 'awaiting_decision') return undefined
  const error = outcome.error
  if (outcome.status === 'rejected' || error.code === 'rejected' || error.code === 'denied') {
    return {
      status: 'rejected',
      output: { accepted: false, rejected: true, ...(error.code === 'denied' && { reason: error.message }) },
    }
  }
  if (outcome.status === 'expired') return { status: 'expired', output: { accepted: false, expired: true } }
  if (outcome.status === 'cancelled') return { status: 'cancelled', output: { accepted: false, cancelled: true } }
  // Cut off by a crash: whether it took effect is unknown, and the call says so.
  if (error.code === 'interrupted')
    return { status: 'interrupted', output: { error: JSON.parse(JSON.stringify(error)) as JsonValue } }
  return { status: 'error', output: { error: JSON.parse(JSON.stringify(error)) as JsonValue } }
}
