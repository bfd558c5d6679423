import type { FastifyReply } from 'fastify'
import type { BusError, DispatchOutcome } from '../cmdbus/index.js'
import { HttpProblem, problemCatalogue, type ProblemCode } from './problem.js'

const coreOnlyCodes = new Set(['quota_exceeded', 'too_many_uploads', 'too_many_executions', 'result_not_stored'])

/** Maps a bus error to the problem the client gets; plugin-defined codes keep theirs in `commandCode`. */
export function busProblem(error: BusError, dispatchId: string | null): HttpProblem {
  const extensions: Record<string, unknown> = { ...(dispatchId && { dispatchId }) }
  if (error.errors) extensions.errors = error.errors
  if (error.reasons) extensions.reasons = error.reasons
  const mapped: Record<string, ProblemCode> = {
    // Written before 2026-12-05 (now command_timeout, as the client gets it).
    timeout: 'command_timeout',
    rejected: 'forbidden',
    expired: 'decision_expired',
    cancelled: 'command_failed',
    interrupted: 'command_interrupted',
  }
  // Codes added for the server's own limits keep their HTTP meaning only when core raised them: a
  // plugin's CommandError of the same name stays the plugin's (command_error, with its commandCode).
  const known = error.code in problemCatalogue && (error.core === true || !coreOnlyCodes.has(error.code))
  const code = mapped[error.code] ?? (known ? (error.code as ProblemCode) : undefined)
  if (code) return new HttpProblem(code, error.message, extensions)
  return new HttpProblem('command_error', error.message, { ...extensions, commandCode: error.code })
}

/** The HTTP answer for a dispatch: 200 with the result, 202 with the pending decision, or a problem. */
export function sendDispatchOutcome(reply: FastifyReply, outcome: DispatchOutcome): unknown {
  if (outcome.replayed) reply.header('idempotent-replayed', 'true')
  if (outcome.status === 'succeeded')
    return reply.code(200).send({ dispatchId: outcome.dispatchId, status: outcome.status, result: outcome.result })
  if (outcome.status === 'awaiting_decision')
    return reply.code(202).send({ dispatchId: outcome.dispatchId, status: outcome.status, decision: outcome.decision })
  throw busProblem(outcome.error, outcome.dispatchId)
}

/** A dispatch outcome as a JSON value inside another answer (decisions). */
export function outcomeView(outcome: DispatchOutcome): Record<string, unknown> {
  if (outcome.status === 'succeeded')
    return { dispatchId: outcome.dispatchId, status: outcome.status, result: outcome.result }
  if (outcome.status === 'awaiting_decision')
    return { dispatchId: outcome.dispatchId, status: outcome.status, decisionId: outcome.decision.id }
  return { dispatchId: outcome.dispatchId, status: outcome.status, error: outcome.error }
}
