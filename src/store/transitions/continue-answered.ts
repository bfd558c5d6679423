import { appendEvents } from '../event-log.js'
import type { Store } from '../open-store.js'
import { lockRun, runEvent, updateRun, type Run } from '../run-repository.js'
import { listToolCalls } from '../tool-call-repository.js'
import type { ToolCallStatus } from '../database.js'
import type { Lease } from './lease.js'

/** A call in these statuses has no terminal result yet. */
export const openToolCallStatuses: ToolCallStatus[] = ['pending', 'running', 'awaiting_decision', 'awaiting_output']

/**
 * requires_action → running: every awaited call is answered. Without a lease (the server is
 * stopping) the run continues unleased, for the next sweeper to drive. Undefined when the run is
 * not waiting or a call is still open.
 */
export async function continueAnsweredRun(store: Store, runId: string, lease: Lease | null): Promise<Run | undefined> {
  return store.transaction(async (tx) => {
    const run = await lockRun(tx, runId)
    if (!run || run.status !== 'requires_action') return undefined
    const open = (await listToolCalls(tx, runId)).filter((call) => openToolCallStatuses.includes(call.status))
    if (open.length > 0) return undefined
    const updated = await updateRun(tx, runId, {
      move: { from: ['requires_action'], to: 'running' },
      phase: 'tool_done',
      requiredAction: null,
      lease,
      waiting: false,
    })
    await appendEvents(tx, [runEvent(updated, 'run.status', { runId, status: updated.status, phase: updated.phase })])
    return updated
  })
}
