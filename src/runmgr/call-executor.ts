import { auditClientCall, clientCallAudit, DrivenCall, hashParams, type DispatchOutcome } from '../cmdbus/index.js'
import type { JsonValue } from '../extension/index.js'
import {
  appendEvents,
  latestAuditHashOf,
  LeaseLost,
  newId,
  listToolCalls,
  runEvent,
  updateToolCall,
  type CarriedResult,
  type CarriedTransition,
  type Run,
  type Store,
  type ToolCallRecord,
} from '../store/index.js'
import { failSpan, inSpan, setContent, type Span } from '../telemetry/index.js'
import type { Driver } from './driver.js'
import type { DriverKit } from './driver-kit.js'
import type { KnownScope } from './model-turn.js'
import { parseArguments, type ToolEntry } from './tool-table.js'

/** What a round's calls came to. */
export interface CallsDone {
  /** Some call waits for a human or the client. */
  waiting: boolean
  /** The run's next step (`then`), written with the last call's answer. */
  carried?: CarriedResult
}

/**
 * Dispatches a round's calls in order. `then` makes the run's next step, which goes with the last
 * call's answer when nothing waits (docs/architecture.md#the-run-loop); otherwise the caller writes it.
 */
export async function runCalls(
  kit: DriverKit,
  run: Run,
  calls: ToolCallRecord[],
  tools: Map<string, ToolEntry>,
  driver: Driver,
  known?: KnownScope,
  then?: () => CarriedTransition,
): Promise<CallsDone> {
  const { store, bus } = kit
  const { fence } = driver
  let waiting = false
  // Earlier results are looked up only for calls that may reuse them (idempotent commands).
  let earlier: ToolCallRecord[] | undefined
  let carried: CarriedResult | undefined
  for (const [index, call] of calls.entries()) {
    if (driver.loop.signal.aborted) return { waiting }
    const entry = tools.get(call.name)
    const parsed = parseArguments(call.rawArgs)
    const fail = (output: JsonValue) =>
      kit.writer.fenced(fence, (tx, locked) => kit.ledger.finish(tx, locked, call, 'error', output))
    if (!entry) {
      await fail({
        error: {
          code: 'unknown_tool',
          message: `there is no tool named ${JSON.stringify(call.name.slice(0, 100))}${call.name.length > 100 ? ' (cut)' : ''}; use one of the offered tools`,
        },
      })
      continue
    }
    if (parsed.error || parsed.value === null || typeof parsed.value !== 'object' || Array.isArray(parsed.value)) {
      const error = {
        code: 'invalid_arguments',
        message: `the arguments are not a JSON object: ${parsed.error ?? 'wrong type'}`,
      }
      // A client tool's call it could not even be shown counts as rejected (never handed to the client).
      if (entry.kind === 'client')
        await kit.writer.fenced(fence, (tx, locked) =>
          kit.ledger.finish(
            tx,
            locked,
            call,
            'rejected',
            { accepted: false, rejected: true, error },
            { auditError: { code: error.code, message: `not handed to the client: ${error.message}` } },
          ),
        )
      else await fail({ error })
      continue
    }
    if (entry.kind === 'client') {
      kit.ledger.started(call.id)
      await kit.writer.fenced(fence, async (tx, locked) => {
        await updateToolCall(tx, call.id, { status: 'awaiting_output', started: true })
        await auditClientCall(tx, clientCallAudit(locked, call))
        await appendEvents(tx, [runEvent(locked, 'tool_call.started', { callId: call.id })])
      })
      waiting = true
      continue
    }
    const params = parsed.value as { [key: string]: JsonValue }
    // An identical read-only call in this run returns the earlier ok result again.
    if (entry.command.spec.idempotent) {
      const hash = hashParams(params)
      earlier ??= await listToolCalls(store, run.id)
      const previous = earlier.find(
        (candidate) =>
          candidate.status === 'ok' &&
          candidate.name === call.name &&
          candidate.args !== null &&
          hashParams(candidate.args as { [key: string]: JsonValue }) === hash,
      )
      if (previous) {
        await kit.writer.fenced(fence, (tx, locked) =>
          kit.ledger.finish(tx, locked, call, 'ok', previous.output, { repeatOf: previous.id }),
        )
        continue
      }
    }
    kit.ledger.started(call.id)
    // What the turn's end read serves the round's first dispatch only: an earlier call may have run for
    // minutes, so every later one reads the conversation and project again.
    const scope = known
    known = undefined
    // The tool message's id is made first: the next step's message sorts after it.
    const carry =
      then && !waiting && index === calls.length - 1
        ? { messageId: newId(), then: then(), until: driver.loop.signal }
        : undefined
    const driven = new DrivenCall(store, {
      run,
      callId: call.id,
      lease: { owner: fence.owner, ms: kit.leases.ms },
      toolOutputLimit: kit.ledger.toolOutputLimit,
      modelText: entry.command.modelText,
      startedAt: performance.now(),
      ...carry,
    })
    const outcome = await inSpan(
      `execute_tool ${call.name}`,
      {
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': call.name,
        'gen_ai.tool.call.id': call.providerCallId,
        'gen_ai.tool.type': 'function',
        'plinth.command.id': entry.command.spec.id,
        'plinth.run.id': run.id,
      },
      async (span) => {
        setContent(span, 'gen_ai.tool.call.arguments', () => params)
        const outcome = await bus.dispatch({
          commandId: entry.command.spec.id,
          params,
          entrance: 'agent',
          actor: { type: 'agent', id: run.id, onBehalfOf: run.ownerId },
          conversationId: run.conversationId,
          projectId: run.projectId,
          runId: run.id,
          callId: call.id,
          idempotencyKey: `${run.id}:${call.id}`,
          // A call of this driver's own round has never been dispatched (a resumed run's may have been).
          fresh: !driver.resumed,
          approvalPolicy: run.approvalPolicy,
          signal: driver.calls.signal,
          driven,
          ...(scope && { known: scope }),
        })
        await annotateToolSpan(store, span, outcome)
        return outcome
      },
    )
    carried = driven.carried
    if (driven.recorded) kit.ledger.answered(call.id, outcome)
    // A replayed outcome (the dispatch existed): nothing of the call was written with it; write it now, fenced.
    else
      await kit.writer.fenced(fence, (tx, locked) =>
        outcome.status === 'awaiting_decision'
          ? updateToolCall(tx, call.id, {
              status: 'awaiting_decision',
              dispatchId: outcome.dispatchId,
              decisionId: outcome.decision.id,
            })
          : kit.ledger.applyOutcome(tx, locked, call, outcome),
      )
    if (driven.lost) throw new LeaseLost()
    if (outcome.status === 'awaiting_decision') {
      waiting = true
      continue
    }
    if (outcome.status === 'succeeded') earlier?.push({ ...call, status: 'ok', output: outcome.result })
  }
  return { waiting, ...(carried && { carried }) }
}

/** The tool span names the dispatch, its outcome and the hash of its latest audit entry (read only when traced). */
async function annotateToolSpan(store: Store, span: Span, outcome: DispatchOutcome): Promise<void> {
  if (!span.isRecording()) return
  span.setAttribute('plinth.dispatch.status', outcome.status)
  if (outcome.dispatchId) {
    span.setAttribute('plinth.dispatch.id', outcome.dispatchId)
    const hash = await latestAuditHashOf(store, outcome.dispatchId).catch(() => undefined)
    if (hash) span.setAttribute('plinth.audit.hash', hash)
  }
  if (outcome.status === 'succeeded') setContent(span, 'gen_ai.tool.call.result', () => outcome.result)
  else if (outcome.status !== 'awaiting_decision') failSpan(span, outcome.error.message, outcome.error.code)
}
