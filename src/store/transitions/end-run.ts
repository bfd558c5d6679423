import type { JsonValue } from '../database.js'
import { appendEvents } from '../event-log.js'
import type { Executor } from '../executor.js'
import type { NewEvent } from '../event-log.js'
import { runEvent, updateRun, type Run, type RunPatch } from '../run-repository.js'
import { moveInto } from '../run-states.js'

/** A run's terminal state. */
export interface RunEnding {
  status: 'completed' | 'failed' | 'cancelled' | 'expired'
  reason?: string
  error?: { [key: string]: JsonValue }
  usage?: Run['usage']
  /** A completed run's answer, parsed and validated against its `output` schema. */
  output?: JsonValue
}

/**
 * → completed | failed | cancelled | expired, in the caller's locked (or fenced) transaction: the
 * terminal state and the events that announce it. Its open calls the caller answers first (the ledger's
 * `end`), so every call has its result before the run is over.
 */
export async function endRun(tx: Executor, runId: string, ending: RunEnding): Promise<Run> {
  const run = await updateRun(tx, runId, endPatch(ending))
  await appendEvents(tx, runEndedEvents(run, ending))
  return run
}

/** A run's terminal state as one patch (so a fence can end a run that has nothing open in its own statement). */
export function endPatch(ending: RunEnding): RunPatch {
  return {
    move: moveInto(ending.status),
    phase: null,
    requiredAction: null,
    ended: true,
    lease: null,
    waiting: false,
    ...(ending.error && { error: ending.error }),
    ...(ending.reason && { cancelReason: ending.reason }),
    ...(ending.usage && { usage: ending.usage }),
    ...(ending.output !== undefined && { output: ending.output, outputRepair: null }),
  }
}

/** The events that announce a run's end (whoever writes it: `endRun`, or a fence that carries `endPatch`). */
export function runEndedEvents(run: Run, ending: RunEnding): NewEvent[] {
  const runId = run.id
  const terminal =
    ending.status === 'completed'
      ? runEvent(run, 'run.completed', {
          runId,
          usage: ending.usage ?? run.usage,
          ...(ending.output !== undefined && { output: ending.output }),
        })
      : ending.status === 'failed'
        ? runEvent(run, 'run.failed', { runId, error: ending.error ?? run.error, usage: ending.usage ?? run.usage })
        : ending.status === 'cancelled'
          ? runEvent(run, 'run.cancelled', { runId, reason: ending.reason ?? 'cancelled' })
          : runEvent(run, 'run.expired', { runId })
  return [runEvent(run, 'run.status', { runId, status: ending.status, phase: null }), terminal]
}
