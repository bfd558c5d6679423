import { appendEvents } from '../event-log.js'
import type { Executor } from '../executor.js'
import { runEvent, updateRun, type Run } from '../run-repository.js'
import { completeAssistantMessage } from '../transcript-repository.js'

/**
 * A running run's driver stops with the server, in its fenced transaction: the turn it was streaming
 * (if any) is kept as `interrupted` and its round will be asked again; the lease is released so the
 * next server (or another instance) resumes the run at once. The status does not change.
 */
export async function releaseForShutdown(
  tx: Executor,
  run: Run,
  turn: { messageId: string; text: string } | null,
): Promise<void> {
  if (turn) {
    await completeAssistantMessage(tx, turn.messageId, turn.text, null, 'interrupted')
    await appendEvents(tx, [
      runEvent(run, 'message.completed', {
        messageId: turn.messageId,
        content: turn.text,
        toolCalls: null,
        status: 'interrupted',
      }),
    ])
  }
  await updateRun(tx, run.id, { lease: null, ...(turn && { iteration: Math.max(0, run.iteration - 1) }) })
}
