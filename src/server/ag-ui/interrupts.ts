import type { Interrupt } from '@ag-ui/core'

/** What a run in `requires_action` waits for, as `requiredAction` holds it. */
export interface WaitingWork {
  decisions: Array<{
    decisionId: string
    callId: string
    name: string
    commandId: string
    risk: string | null
    args: unknown
    kind?: 'approve' | 'connect'
    connect?: { server: string; path: string }
  }>
  toolOutputs: Array<{ callId: string; name: string; args: unknown }>
}

/** A decision's details from its `decision.required` event (the interrupt's prompt and expiry). */
export interface DecisionDetails {
  preview: string | null
  expiresAt: string
  reasons: string[]
}

/** A client tool call's evaluated risk, from its `tool_call.created` event. */
export interface ClientToolRisk {
  risk: string | null
  matchedRules: unknown
}

/** Reasons of the interrupts Plinth raises. */
export const interruptReasons = {
  approval: 'tool_approval',
  connect: 'account_connection',
  clientTool: 'client_tool',
} as const

/** What a resume entry answering an approval carries. */
export const decisionAnswerSchema = {
  type: 'object',
  properties: {
    decision: {
      enum: ['approve', 'approve_session', 'reject'],
      description: 'approve once, approve for the rest of the session, or reject',
    },
    note: { type: 'string', maxLength: 2000 },
  },
  required: ['decision'],
  additionalProperties: false,
}

export function waitingWorkOf(requiredAction: unknown): WaitingWork {
  const value = (requiredAction ?? {}) as Partial<WaitingWork>
  return { decisions: value.decisions ?? [], toolOutputs: value.toolOutputs ?? [] }
}

/** The interrupts of a wait: one per decision, one per client-tool call. */
export function interruptsOf(
  work: WaitingWork,
  details: ReadonlyMap<string, DecisionDetails>,
  runId: string,
  clientRisks: ReadonlyMap<string, ClientToolRisk> = new Map(),
): Interrupt[] {
  const decisions = work.decisions.map((decision): Interrupt => {
    const known = details.get(decision.decisionId)
    const connect = decision.kind === 'connect'
    return {
      id: decision.decisionId,
      reason: connect ? interruptReasons.connect : interruptReasons.approval,
      message: connect
        ? `Connect your account to ${decision.connect?.server ?? 'the MCP server'} (POST ${decision.connect?.path ?? '/api/mcp/connections/:server'}) to let ${decision.name} run, or cancel to reject it`
        : (known?.preview ?? `${decision.commandId} (risk ${decision.risk ?? 'unknown'}) waits for approval`),
      toolCallId: decision.callId,
      ...(!connect && { responseSchema: decisionAnswerSchema }),
      ...(known && { expiresAt: known.expiresAt }),
      metadata: {
        plinth: {
          runId,
          commandId: decision.commandId,
          risk: decision.risk,
          args: decision.args,
          ...(known && { reasons: known.reasons }),
          ...(decision.connect && { connect: decision.connect }),
        },
      },
    }
  })
  const clientTools = work.toolOutputs.map((call): Interrupt => ({
    id: call.callId,
    reason: interruptReasons.clientTool,
    message: `Run the client tool ${call.name} and resume with its output as the payload`,
    toolCallId: call.callId,
    metadata: { plinth: { runId, name: call.name, args: call.args, ...clientRisks.get(call.callId) } },
  }))
  return [...decisions, ...clientTools]
}
