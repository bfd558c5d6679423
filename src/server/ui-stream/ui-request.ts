import { HttpProblem } from '../problem.js'

/** A message as `useChat` sends it (AI SDK 6 `UIMessage`), checked only as far as Plinth reads it. */
export interface UiMessage {
  id: string
  role: string
  parts: Array<{ type: string; [key: string]: unknown }>
}

/** What the last message of a request asks: a new run, or answers to the run it continues. */
export type UiRequest =
  | { kind: 'new'; text: string }
  | {
      kind: 'answer'
      /** The assistant message's id: the run's id. */
      runId: string
      approvals: Array<{ approvalId: string; approved: boolean; reason?: string }>
      outputs: Array<{ callId: string; output: unknown }>
    }

const roles = new Set(['system', 'user', 'assistant'])
const partTypes = new Set(['text', 'reasoning', 'source-url', 'source-document', 'file', 'step-start', 'dynamic-tool'])

/**
 * Reads a `useChat` request (docs/ui-stream.md, "Requests"). Every message is checked for a role and
 * part types the AI SDK defines (else 400 `invalid_ui_message`), but only the last one is acted on:
 * Plinth's own conversation is the history, so earlier messages are not compared with it.
 */
export function readUiRequest(messages: readonly UiMessage[]): UiRequest {
  messages.forEach((message, index) => {
    if (!roles.has(message.role))
      throw new HttpProblem(
        'invalid_ui_message',
        `messages[${index}].role: ${JSON.stringify(message.role)} is not system, user or assistant`,
      )
    message.parts.forEach((part, at) => {
      if (!partTypes.has(part.type) && !part.type.startsWith('tool-') && !part.type.startsWith('data-')) {
        throw new HttpProblem(
          'invalid_ui_message',
          `messages[${index}].parts[${at}].type: ${JSON.stringify(part.type)} is not a UI message part type`,
        )
      }
    })
  })
  const last = messages.at(-1)
  if (!last) throw new HttpProblem('invalid_ui_message', 'messages: empty; send at least the user message')
  if (last.role === 'user') return { kind: 'new', text: userText(last, messages.length - 1) }
  if (last.role === 'assistant') return answers(last)
  throw new HttpProblem(
    'invalid_ui_message',
    `messages[${messages.length - 1}]: the last message must be the user's (or the assistant's, answering its tool calls)`,
  )
}

function userText(message: UiMessage, index: number): string {
  const texts: string[] = []
  message.parts.forEach((part, at) => {
    if (part.type === 'text') {
      if (typeof part.text !== 'string')
        throw new HttpProblem('invalid_ui_message', `messages[${index}].parts[${at}].text: must be a string`)
      texts.push(part.text)
    } else if (part.type === 'file')
      throw new HttpProblem(
        'unsupported_ui_part',
        `messages[${index}].parts[${at}]: file parts are not supported yet; send text`,
      )
  })
  const text = texts.join('\n').trim()
  if (!text) throw new HttpProblem('invalid_ui_message', `messages[${index}]: the user message has no text`)
  return text
}

/** The approvals and client-tool outputs the assistant message carries (AI SDK 6 tool part states). */
function answers(message: UiMessage): UiRequest {
  const approvals: Array<{ approvalId: string; approved: boolean; reason?: string }> = []
  const outputs: Array<{ callId: string; output: unknown }> = []
  for (const part of message.parts) {
    if (part.type !== 'dynamic-tool' && !part.type.startsWith('tool-')) continue
    const approval = part.approval as { id?: unknown; approved?: unknown; reason?: unknown } | undefined
    if (
      part.state === 'approval-responded' &&
      typeof approval?.id === 'string' &&
      typeof approval.approved === 'boolean'
    ) {
      approvals.push({
        approvalId: approval.id,
        approved: approval.approved,
        ...(typeof approval.reason === 'string' && { reason: approval.reason }),
      })
    }
    // A client tool's result (the client ran it); Plinth's own commands carry providerExecuted.
    if (part.providerExecuted !== true && typeof part.toolCallId === 'string') {
      if (part.state === 'output-available') outputs.push({ callId: part.toolCallId, output: part.output ?? null })
      else if (part.state === 'output-error')
        // A failure, recorded as one (as AG-UI's tool error is): `accepted: false` makes the call's status `error`.
        outputs.push({
          callId: part.toolCallId,
          output: {
            accepted: false,
            error: typeof part.errorText === 'string' ? part.errorText : 'the client tool failed',
          },
        })
    }
  }
  return { kind: 'answer', runId: message.id, approvals, outputs }
}
