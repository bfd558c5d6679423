import type { JsonValue } from '../database.js'
import { pendingDecisionKinds } from '../decision-repository.js'
import { appendEvents } from '../event-log.js'
import type { Executor } from '../executor.js'
import { runEvent, updateRun, type Run } from '../run-repository.js'
import { listToolCalls } from '../tool-call-repository.js'

/**
 * running → requires_action, in the caller's fenced transaction: a call of the round awaits a
 * decision or a client tool output, and the lease is given up until every call is answered.
 */
export async function waitForPerson(tx: Executor, runId: string): Promise<Run> {
  const requiredAction = await requiredActionOf(tx, runId)
  const run = await updateRun(tx, runId, {
    move: { from: ['running'], to: 'requires_action' },
    phase: null,
    requiredAction,
    lease: null,
    waiting: true,
  })
  await appendEvents(tx, [runEvent(run, 'run.status', { runId, status: run.status, phase: null, requiredAction })])
  return run
}

/**
 * A waiting run now waits for less (one of its calls was answered): its `requiredAction` again, under
 * the caller's row lock. Not a new `run.requires_action` for webhooks.
 */
export async function waitForLess(
  tx: Executor,
  runId: string,
  options: { announceNothingLeft?: boolean } = {},
): Promise<Run> {
  const requiredAction = await requiredActionOf(tx, runId)
  const run = await updateRun(tx, runId, { requiredAction })
  // Nothing left to wait for: the run continues next, and its `running` status says so (a waiting
  // status awaiting nothing would only be noise) — unless it waits for approved calls to finish first.
  if (!options.announceNothingLeft && requiredAction.decisions.length === 0 && requiredAction.toolOutputs.length === 0)
    return run
  await appendEvents(tx, [
    {
      ...runEvent(run, 'run.status', { runId, status: run.status, phase: null, requiredAction }),
      webhook: false,
    },
  ])
  return run
}

/** What a waiting run awaits (its `requiredAction`): decisions, and client tool outputs. */
export async function requiredActionOf(
  db: Executor,
  runId: string,
): Promise<{ decisions: JsonValue[]; toolOutputs: JsonValue[] }> {
  const calls = await listToolCalls(db, runId)
  const asked = calls.filter((call) => call.status === 'awaiting_decision')
  const kinds = await pendingDecisionKinds(
    db,
    asked.map((call) => call.decisionId).filter((id): id is string => typeof id === 'string'),
  )
  // A call a person approved waits for its command now, not for anyone: it is not required of them.
  const waiting = asked.filter((call) => !call.decisionId || kinds.has(call.decisionId))
  return {
    decisions: waiting.map((call) => {
      const kind = (call.decisionId && kinds.get(call.decisionId)) || 'approve'
      // A `connect` decision: the user connects their account to the MCP server, which approves the call.
      const server = kind === 'connect' ? (call.commandId ?? '').split('.')[1] : undefined
      return {
        decisionId: call.decisionId,
        callId: call.id,
        commandId: call.commandId,
        name: call.name,
        args: call.args,
        risk: call.risk,
        kind,
        ...(server && { connect: { server, path: `/api/mcp/connections/${server}` } }),
      }
    }),
    toolOutputs: calls
      .filter((call) => call.status === 'awaiting_output')
      .map((call) => ({ callId: call.id, name: call.name, args: call.args })),
  }
}
