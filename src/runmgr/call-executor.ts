import { hashParams, type DispatchOutcome } from '../cmdbus/index.js'
import type { JsonValue } from '../extension/index.js'
import {
  appendEvents,
  fenceRun,
  listToolCalls,
  runEvent,
  toolCallStartedWithDispatch,
  updateToolCall,
  type Executor,
  type Run,
  type ToolCallRecord,
} from '../store/index.js'
import { LeaseLost, type Driver, type DriverKit } from './driver.js'
import { clientCallAudit } from './run-ledger.js'
import { parseArguments, type ToolEntry } from './tool-table.js'

/** Dispatches a round's calls in order. Returns true when any waits for a human or the client. */
export async function runCalls(
  kit: DriverKit,
  run: Run,
  calls: ToolCallRecord[],
  tools: Map<string, ToolEntry>,
  driver: Driver,
): Promise<boolean> {
  const { store, bus } = kit
  const { fence } = driver
  let waiting = false
  // Earlier results are looked up only for calls that may reuse them (idempotent commands).
  let earlier: ToolCallRecord[] | undefined
  for (const call of calls) {
    if (driver.loop.signal.aborted) return waiting
    const entry = tools.get(call.name)
    const parsed = parseArguments(call.rawArgs)
    const fail = (output: JsonValue) =>
      kit.writer.fenced(fence, (tx, locked) => kit.ledger.finish(tx, locked, call, 'error', output))
    if (!entry) {
      await fail({
        error: { code: 'unknown_tool', message: `there is no tool named ${call.name}; use one of the offered tools` },
      })
      continue
    }
    if (parsed.error || parsed.value === null || typeof parsed.value !== 'object' || Array.isArray(parsed.value)) {
      await fail({
        error: {
          code: 'invalid_arguments',
          message: `the arguments are not a JSON object: ${parsed.error ?? 'wrong type'}`,
        },
      })
      continue
    }
    if (entry.kind === 'client') {
      kit.ledger.started(call.id)
      await kit.writer.fenced(fence, async (tx, locked) => {
        await updateToolCall(tx, call.id, { status: 'awaiting_output', started: true })
        await bus.auditClientCall(tx, clientCallAudit(locked, call))
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
    // The call's own writes ride in the dispatch's transactions, fenced by the lease: `running` with
    // the dispatch row (a driver that lost the lease dispatches nothing), the result (or the wait for
    // a decision) with the dispatch's outcome (a driver that lost it meanwhile records nothing: the
    // run's new owner, or whoever ended it, has answered the call).
    let recorded = false
    let lost = false
    // Each of the dispatch's transactions fences the run first (before the bus's audit and event locks).
    let locked: Run | undefined
    const lock = async (tx: Executor): Promise<void> => {
      locked = await fenceRun(tx, fence.runId, fence.owner, kit.leases.expiry())
    }
    const record = async (tx: Executor, outcome: DispatchOutcome): Promise<void> => {
      recorded = true
      if (!locked) {
        lost = true
        return
      }
      if (outcome.status === 'awaiting_decision') {
        await updateToolCall(tx, call.id, {
          status: 'awaiting_decision',
          dispatchId: outcome.dispatchId,
          decisionId: outcome.decision.id,
        })
      } else {
        await kit.ledger.applyOutcome(tx, locked, call, outcome)
      }
    }
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
      within: {
        lock,
        // Written before running only when the call does not run now (refused, or waiting for a person):
        // it has not started, so no `running` and no `tool_call.started` (that comes when it runs).
        persisted: async () => {
          if (!locked) throw new LeaseLost()
        },
        settled: record,
        // The dispatch's row and first entries, the call `running` and its event: one statement, fenced.
        startTogether: () => ({
          fence: { ...fence, expiresAt: kit.leases.expiry() },
          writes: [toolCallStartedWithDispatch(store, call.id)],
          events: [runEvent(run, 'tool_call.started', { callId: call.id })],
          lost: () => new LeaseLost(),
        }),
        // The result and the dispatch's last step in one statement, under the run's fence.
        finishTogether: (outcome) => {
          const part = kit.ledger.outcomePart(store, run, call, outcome)
          if (!part) return undefined
          return {
            fence: { ...fence, expiresAt: kit.leases.expiry() },
            ...part,
            written: (fenced) => {
              recorded = true
              if (!fenced) lost = true
            },
          }
        },
      },
    })
    // A replayed outcome (the dispatch already existed) ran no hook.
    if (!recorded) {
      await store.transaction(async (tx) => {
        await lock(tx)
        await record(tx, outcome)
      })
    }
    if (lost) throw new LeaseLost()
    if (outcome.status === 'awaiting_decision') {
      waiting = true
      continue
    }
    if (outcome.status === 'succeeded') earlier?.push({ ...call, status: 'ok', output: outcome.result })
  }
  return waiting
}
