import { createHash } from 'node:crypto'
import { redact } from './redact.js'
import type { JsonValue } from '../extension/index.js'
import { appendEvents, canonicalJson, type DecisionRecord, type DispatchRecord, type Executor } from '../store/index.js'
import type { BusError, DecisionView, DispatchOutcome, DispatchRequest, Params } from './bus-types.js'
import type { RegisteredCommand } from './command-catalog.js'

/** What an idempotency key stands for: everything the caller chose, ids as named (not as resolved). */
export function hashRequest(commandId: string, paramsHash: string, request: DispatchRequest): string {
  return createHash('sha256')
    .update(
      JSON.stringify([
        commandId,
        paramsHash,
        request.entrance,
        request.projectId ?? null,
        request.conversationId ?? null,
      ]),
    )
    .digest('hex')
}

/** A CommandError from any copy of the extension surface (plugins may bundle their own). */
export function isCommandError(error: unknown): error is { code: string; message: string } {
  const candidate = error as { name?: unknown; code?: unknown; message?: unknown } | null
  return (
    candidate !== null &&
    typeof candidate === 'object' &&
    candidate.name === 'CommandError' &&
    typeof candidate.code === 'string' &&
    typeof candidate.message === 'string'
  )
}

export function fail(dispatchId: string | null, code: BusError['code'], message: string): DispatchOutcome {
  return { status: 'failed', dispatchId, error: { code, message } }
}

export function staticRisk(command: RegisteredCommand): string {
  return typeof command.spec.risk === 'string' ? command.spec.risk : 'unclassified'
}

export function validateParams(command: RegisteredCommand, params: Params): BusError | undefined {
  if (command.validate(params)) return undefined
  const errors = (command.validate.errors ?? []).map((issue) => {
    const base = ['params', ...issue.instancePath.split('/').filter(Boolean)]
    if (issue.keyword === 'additionalProperties')
      return { path: [...base, String(issue.params.additionalProperty)].join('.'), message: 'unknown field' }
    if (issue.keyword === 'required')
      return { path: [...base, String(issue.params.missingProperty)].join('.'), message: 'is required' }
    // A pattern alone says little to a person or a model: the field's description says what it wants.
    const described = issue.keyword === 'pattern' ? describedBy(command.spec.paramsSchema, issue.schemaPath) : undefined
    const message = issue.message ?? 'is invalid'
    return { path: base.join('.'), message: described ? `${message} (${described})` : message }
  })
  return {
    code: 'validation_failed',
    message: errors.map((error) => `${error.path}: ${error.message}`).join('; '),
    errors,
  }
}

/** The `description` of the schema holding the keyword at `schemaPath` (`#/properties/command/pattern`). */
function describedBy(schema: unknown, schemaPath: string): string | undefined {
  let node = schema
  for (const segment of schemaPath.replace(/^#\//, '').split('/').slice(0, -1)) {
    if (typeof node !== 'object' || node === null) return undefined
    node = (node as Record<string, unknown>)[decodeURIComponent(segment.replace(/~1/g, '/').replace(/~0/g, '~'))]
  }
  const description =
    typeof node === 'object' && node !== null ? (node as { description?: unknown }).description : undefined
  return typeof description === 'string' ? description : undefined
}

/** sha256 of the canonical JSON (RFC 8785) of params. */
export function hashParams(params: Params): string {
  return createHash('sha256').update(canonicalJson(params)).digest('hex')
}

export function toJsonError(error: BusError): { code: string; message: string; [key: string]: JsonValue } {
  return JSON.parse(JSON.stringify(error)) as { code: string; message: string }
}

export function outcomeOf(dispatch: DispatchRecord): DispatchOutcome {
  if (dispatch.status === 'succeeded') return { status: 'succeeded', dispatchId: dispatch.id, result: dispatch.result }
  const error = (dispatch.error as BusError | null) ?? { code: dispatch.status, message: dispatch.status }
  const status =
    dispatch.status === 'rejected' || dispatch.status === 'expired' || dispatch.status === 'cancelled'
      ? dispatch.status
      : 'failed'
  return { status, dispatchId: dispatch.id, error }
}

export function toDecisionView(decision: DecisionRecord): DecisionView {
  return {
    id: decision.id,
    dispatchId: decision.dispatchId,
    status: decision.status,
    commandId: decision.commandId,
    params: decision.params,
    preview: decision.preview,
    risk: decision.risk,
    reasons: decision.reasons,
    projectId: decision.projectId,
    conversationId: decision.conversationId,
    runId: decision.runId,
    callId: decision.callId,
    scope: decision.scope,
    decidedBy: decision.decidedBy,
    note: decision.note,
    createdAt: decision.createdAt,
    expiresAt: decision.expiresAt,
    decidedAt: decision.decidedAt,
    kind: decision.kind,
    // Edited params are shown redacted, like the proposed ones.
    reply: decision.reply?.kind === 'edit' ? { kind: 'edit', params: redact(decision.reply.params) } : decision.reply,
  }
}

export async function appendDecisionEvent(
  tx: Executor,
  type: string,
  decision: DecisionRecord,
  data: { [key: string]: JsonValue },
): Promise<void> {
  if (!decision.projectId && !decision.conversationId) return
  await appendEvents(tx, [
    {
      type,
      projectId: decision.projectId,
      conversationId: decision.conversationId,
      runId: decision.runId,
      userId: decision.ownerId,
      data,
    },
  ])
}

export function rejectedOutcome(dispatchId: string): DispatchOutcome {
  return { status: 'rejected', dispatchId, error: { code: 'rejected', message: 'rejected by a human' } }
}
