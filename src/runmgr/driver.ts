import type { CommandBus } from '../cmdbus/index.js'
import type { PluginLogger } from '../extension/index.js'
import type { ModelRegistry } from '../llm/index.js'
import type { Retriever } from '../rag/index.js'
import type { Prefetched, Run, RunFence, Store } from '../store/index.js'
import type { LeaseClock } from './leases.js'
import type { ModelSlots } from './model-slots.js'
import type { RunLedger } from './run-ledger.js'
import type { RunObserver } from './run-observer.js'
import type { RunWriter } from './run-writer.js'

/** The run's lease has passed to someone else (or the run ended elsewhere): its driver stops without writing. */
export class LeaseLost extends Error {
  constructor() {
    super('the run lease has passed to another driver')
    this.name = 'LeaseLost'
  }
}

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

/**
 * What a round's steps (the loop, the model turn, the call executor) work with: the run manager's
 * components, each a named object, so the steps live in their own files.
 */
export interface DriverKit {
  store: Store
  bus: CommandBus
  models: ModelRegistry
  log: PluginLogger
  retriever: Retriever | undefined
  /** The operator's extra system-prompt text. */
  systemPrompt: string | undefined
  observer: RunObserver | undefined
  ledger: RunLedger
  modelSlots: ModelSlots
  leases: LeaseClock
  /** The fenced writes and the ends of runs. */
  writer: RunWriter
}
