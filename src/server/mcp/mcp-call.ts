import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import type { CommandBus, DispatchOutcome, Params, RegisteredCommand } from '../../cmdbus/index.js'
import type { JsonValue } from '../../extension/index.js'
import type { McpElicitor } from './mcp-elicitation.js'
import type { McpScope } from './mcp-tools.js'

/** How to ask the client about a call that needs a person, when its session supports elicitation. */
export interface AskClient {
  elicitor: McpElicitor
  requestId: string | number
  signal: AbortSignal
}

/**
 * Runs one `tools/call` through the bus — entrance `mcp`, the caller as actor — so the same
 * validation, authorization, risk gate, decisions and audit apply as from any other entrance.
 */
export async function callTool(
  bus: CommandBus,
  scope: McpScope,
  command: RegisteredCommand,
  args: Params,
  ask: AskClient | null,
): Promise<CallToolResult> {
  let outcome = await bus.dispatch({
    commandId: command.spec.id,
    params: args,
    entrance: 'mcp',
    actor: { type: 'user', id: scope.userId, onBehalfOf: scope.userId },
    projectId: scope.projectId,
    conversationId: scope.conversationId,
    // MCP has no idempotency key; a client's retry is a new call.
    idempotencyKey: null,
  })
  if (ask && outcome.status === 'awaiting_decision' && outcome.decision.kind === 'approve')
    outcome = await ask.elicitor.ask(command, outcome, ask.requestId, ask.signal)
  return toolResult(command, outcome)
}

/** A dispatch outcome as an MCP tool result. */
export function toolResult(command: RegisteredCommand, outcome: DispatchOutcome): CallToolResult {
  const meta = outcome.dispatchId ? { _meta: { 'plinth/dispatchId': outcome.dispatchId } } : {}
  if (outcome.status === 'succeeded') {
    const text = command.modelText ? command.modelText(outcome.result) : JSON.stringify(outcome.result)
    return {
      content: [{ type: 'text', text }],
      ...(isObject(outcome.result) && { structuredContent: outcome.result }),
      ...meta,
    }
  }
  if (outcome.status === 'awaiting_decision') {
    const { decision } = outcome
    const path = `/api/decisions/${decision.id}`
    const text =
      `Not run yet: ${command.spec.id} is ${decision.risk} risk and needs a person's approval (${decision.reasons.join('; ')}). ` +
      `Decision ${decision.id} waits until ${decision.expiresAt}. The user answers it in the Plinth console, or with ` +
      `POST ${path} and the body {"decision":"approve"} (or "approve_session", or "reject"); approved, the command runs ` +
      `then and the answer holds its result. Do not call the tool again for the same action: that would ask again.`
    return {
      content: [{ type: 'text', text }],
      // Not a result yet: clients must not take the call as done.
      isError: true,
      structuredContent: {
        status: 'awaiting_decision',
        decisionId: decision.id,
        dispatchId: outcome.dispatchId,
        risk: decision.risk,
        reasons: decision.reasons,
        expiresAt: decision.expiresAt,
        answer: { method: 'POST', path, body: { decision: 'approve' } },
      },
      ...meta,
    }
  }
  const { code, message, errors } = outcome.error
  return {
    content: [{ type: 'text', text: `${code}: ${message}` }],
    isError: true,
    structuredContent: {
      error: { code, message, ...(errors && { errors }) },
      ...(outcome.dispatchId && { dispatchId: outcome.dispatchId }),
    },
    ...meta,
  }
}

function isObject(value: JsonValue): value is { [key: string]: JsonValue } {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
}
