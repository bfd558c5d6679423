import type { Message, ResumeEntry } from '@ag-ui/core'
import type { DecisionAnswer } from '../../cmdbus/index.js'
import { HttpProblem } from '../problem.js'
import { callNameIn } from './input.js'
import type { WaitingWork } from './interrupts.js'

/** What an input answers of a waiting run: decisions through the bus, client-tool outputs through the run manager. */
export interface Answers {
  decisions: Array<{ decisionId: string; answer: DecisionAnswer; note?: string }>
  toolOutputs: Array<{ callId: string; output: unknown }>
  /** Calls answered with tool messages (the client already holds their results). */
  byToolMessage: Set<string>
  /** Every decision and call id answered. */
  ids: Set<string>
}

const answers = new Set<string>(['approve', 'approve_session', 'reject'])

/**
 * Reads the answers of an input to the run's wait: `resume` entries (by interrupt id: a decision id or
 * a client-tool call id) and the tool messages at the end of `messages` (AG-UI's frontend-tool
 * answers). Everything the run waits for must be answered at once; an entry for something it does not
 * wait for is 400 `unknown_interrupt` / `unknown_tool_call`.
 */
export function readAnswers(messages: readonly Message[], resume: readonly ResumeEntry[], work: WaitingWork): Answers {
  const found: Answers = { decisions: [], toolOutputs: [], byToolMessage: new Set(), ids: new Set() }
  const decisions = new Map(work.decisions.map((decision) => [decision.decisionId, decision]))
  const calls = new Map(work.toolOutputs.map((call) => [call.callId, call]))
  const take = (id: string, path: string): void => {
    if (found.ids.has(id))
      throw new HttpProblem('validation_failed', `${path}: ${id} is answered twice`, {
        errors: [{ path, message: 'answered twice' }],
      })
    found.ids.add(id)
  }
  resume.forEach((entry, index) => {
    const path = `body.resume.${index}`
    const decision = decisions.get(entry.interruptId)
    if (decision) {
      take(entry.interruptId, path)
      found.decisions.push({ decisionId: entry.interruptId, ...decisionAnswer(entry, path) })
      return
    }
    if (calls.has(entry.interruptId)) {
      take(entry.interruptId, path)
      found.toolOutputs.push({
        callId: entry.interruptId,
        output: entry.status === 'cancelled' ? { accepted: false, rejected: true } : (entry.payload ?? null),
      })
      return
    }
    throw new HttpProblem(
      'unknown_interrupt',
      `resume[${index}].interruptId ${JSON.stringify(entry.interruptId)} is not something the run waits for`,
      { pending: [...decisions.keys(), ...calls.keys()] },
    )
  })
  // The trailing tool messages: answers to the calls the run awaits. A result of a call Plinth ran
  // itself (a TOOL_CALL_RESULT the client kept) is history; one for any other call is refused.
  for (let index = messages.length - 1; index >= 0; index--) {
    const message = messages[index]!
    if (message.role !== 'tool') break
    if (calls.has(message.toolCallId)) {
      take(message.toolCallId, `body.messages.${index}`)
      found.toolOutputs.push({ callId: message.toolCallId, output: toolMessageOutput(message) })
      found.byToolMessage.add(message.toolCallId)
      continue
    }
    if (!callNameIn(messages, message.toolCallId)) {
      throw new HttpProblem(
        'unknown_tool_call',
        `messages[${index}] answers tool call ${JSON.stringify(message.toolCallId)}, which no assistant message of the thread made and the run does not await`,
        { pending: [...decisions.keys(), ...calls.keys()] },
      )
    }
  }
  const missing = [...decisions.keys(), ...calls.keys()].filter((id) => !found.ids.has(id))
  if (found.ids.size > 0 && missing.length > 0) {
    throw new HttpProblem(
      'incomplete_resume',
      `answer everything the run waits for at once; unanswered: ${missing.join(', ')}`,
      { missing },
    )
  }
  return found
}

function decisionAnswer(entry: ResumeEntry, path: string): { answer: DecisionAnswer; note?: string } {
  if (entry.status === 'cancelled') return { answer: 'reject' }
  const payload = entry.payload as { decision?: unknown; note?: unknown } | undefined
  const decision = payload?.decision
  if (typeof decision !== 'string' || !answers.has(decision)) {
    throw new HttpProblem('validation_failed', `${path}.payload.decision must be approve, approve_session or reject`, {
      errors: [{ path: `${path}.payload.decision`, message: 'must be approve, approve_session or reject' }],
    })
  }
  const note = payload?.note
  if (note !== undefined && (typeof note !== 'string' || note.length > 2000)) {
    throw new HttpProblem('validation_failed', `${path}.payload.note must be a string of at most 2000 characters`, {
      errors: [{ path: `${path}.payload.note`, message: 'must be a string of at most 2000 characters' }],
    })
  }
  return { answer: decision as DecisionAnswer, ...(typeof note === 'string' && { note }) }
}

/** A tool message's content as the call's output: JSON when it parses, else the text; `error` marks a failure. */
function toolMessageOutput(message: Extract<Message, { role: 'tool' }>): unknown {
  const text =
    typeof message.content === 'string'
      ? message.content
      : message.content.map((part) => (part.type === 'text' ? part.text : '')).join('')
  if (message.error !== undefined) return { accepted: false, error: message.error, content: text }
  try {
    return JSON.parse(text) as unknown
  } catch {
    return text
  }
}
