import { appendEvents } from './event-log.js'
import type { Store } from './open-store.js'
import { getRun, lockRun, runEvent, terminalRunStatuses } from './run-repository.js'
import { listToolCalls } from './tool-call-repository.js'
import { waitForLess } from './transitions/wait-for-person.js'
import type { Executor } from './executor.js'

/**
 * What the bus needs of a run whose call waited for a person, with nothing of the run manager's: the
 * bus writes these itself (docs/architecture.md#the-command-bus), so control never flows from the bus
 * back up into the run manager for them.
 */

/**
 * Locks the run a decision or dispatch belongs to, if any: first in every transaction that records a
 * step of it, before the audit chain's and the event log's locks (the order every transaction keeps).
 */
export async function lockRunOf(tx: Executor, subject: { runId: string | null }): Promise<void> {
  if (subject.runId) await lockRun(tx, subject.runId)
}

/** An approved call of a run begins running: its `tool_call.started`, announced now, not when it first asked. */
export async function announceDecidedCallStarted(tx: Executor, runId: string, decisionId: string): Promise<void> {
  const run = await getRun(tx, runId)
  if (!run || terminalRunStatuses.includes(run.status)) return
  const call = (await listToolCalls(tx, run.id)).find((candidate) => candidate.decisionId === decisionId)
  if (call) await appendEvents(tx, [runEvent(run, 'tool_call.started', { callId: call.id })])
  // The approved call is no longer required of anyone: `requiredAction` (and a `run.status`) says what is left.
  if (run.status === 'requires_action') await waitForLess(tx, run.id, { announceNothingLeft: true })
}

/**
 * A signal that aborts once the run has ended (cancelled, expired, …), for a handler run on the run's
 * behalf after a person approved it. Whoever ends a run that is not driven announces it on the runs
 * channel, heard by every instance including this one; `stop()` stops listening.
 */
export function runEndedSignal(store: Store, runId: string): { signal: AbortSignal; stop(): void } {
  const controller = new AbortController()
  const check = async (): Promise<void> => {
    const run = await getRun(store, runId)
    if (!run || terminalRunStatuses.includes(run.status)) controller.abort('cancelled')
  }
  const stop = store.runs.subscribe((ended) => {
    // null: the listener reconnected and may have missed this run's announcement.
    if (controller.signal.aborted || (ended !== null && ended !== runId)) return
    check().catch(() => undefined)
  })
  return { signal: controller.signal, stop }
}
