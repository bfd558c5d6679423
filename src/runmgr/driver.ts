import type { Prefetched, Run, RunFence } from '../store/index.js'

/** Why a driver stops: `shutdown` and `lease_lost` leave the run to be resumed; the rest end it. */
export type StopReason = 'cancelled' | 'superseded' | 'shutdown' | 'lease_lost' | (string & {})

/** This process driving one run. */
export interface Driver {
  fence: RunFence
  /** Taken over from a stopped driver: calls of its last round may still be open. */
  resumed: boolean
  /** Whether the owner may write in the project, when already known. */
  writable: boolean | undefined
  /** The run as whoever started this driver just wrote it (so the loop need not read it back). */
  initial?: Run
  /** Read with the run's start by whoever started this driver (for its first round). */
  prefetched?: Prefetched
  /** Aborts the model stream and the loop. */
  loop: AbortController
  /** Aborts tool calls in flight (at once on cancel; after the grace period on shutdown). */
  calls: AbortController
  done: Promise<void>
}

/** Stops a driver: its loop at once, its tool calls too unless the server is shutting down. */
export function abortDriver(driver: Driver, reason: StopReason): void {
  driver.loop.abort(reason)
  if (reason !== 'shutdown') driver.calls.abort(reason)
}
