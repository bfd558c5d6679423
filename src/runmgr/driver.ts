import type { CommandBus } from '../cmdbus/index.js'
import type { PluginLogger } from '../extension/index.js'
import type { ModelRegistry } from '../llm/index.js'
import type { Retriever } from '../rag/index.js'
import type {
  Executor,
  NewEvent,
  Prefetched,
  Run,
  RunFence,
  RunPatch,
  Store,
  TransitionReads,
  TransitionWrite,
} from '../store/index.js'
import type { ModelSlots } from './model-slots.js'
import type { RunEnd, RunLedger } from './run-ledger.js'
import type { RunObserver } from './run-observer.js'

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

/**
 * What a round's steps (the model turn, the call executor) need from the run manager: its
 * components and its fenced writes. One object, so the steps live in their own files.
 */
export interface DriverKit {
  store: Store
  bus: CommandBus
  models: ModelRegistry
  log: PluginLogger
  retriever: Retriever | undefined
  /** The operator's extra system-prompt text. */
  systemPrompt: string | undefined
  /** A lease's length: the heartbeat renews it at a third of that. */
  leaseMs: number
  observer: RunObserver | undefined
  ledger: RunLedger
  modelSlots: ModelSlots
  /** One transaction under the run's lease; throws LeaseLost (writing nothing) when the lease has passed. */
  fenced<T>(
    fence: RunFence,
    fn: (tx: Executor, run: Run) => Promise<T>,
    options?: { audit?: boolean; patch?: RunPatch },
  ): Promise<T>
  /** One state change in one statement under the run's lease; throws LeaseLost (writing nothing) when the lease has passed. */
  transition(
    fence: RunFence,
    patch: RunPatch,
    writes: TransitionWrite[],
    events: NewEvent[],
    reads?: TransitionReads,
  ): Promise<{ run: Run; reads: { [name: string]: unknown } }>
  /** The driver was stopped mid-round: end, checkpoint or leave the run as the stop's reason says. */
  endAborted(run: Run, driver: Driver, messageId: string | null, text: string): Promise<void>
  expireDecisions(decisionIds: string[]): Promise<void>
  /** Ends the run under its lease (see RunManager). */
  end(runId: string, end: RunEnd, options: { fence: RunFence }): Promise<void>
  /** Stops a driver: its loop at once, its tool calls too unless the server is shutting down. */
  abort(driver: Driver, reason: StopReason): void
  /** When a lease taken or renewed now runs out. */
  expiry(): Date
}
