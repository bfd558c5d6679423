import type { CallLedger, CommandBus, RunEnd } from '../cmdbus/index.js'
import type { PluginLogger } from '../extension/index.js'
import {
  announceRunEnded,
  appendEvents,
  completeAssistantMessage,
  fenceRun,
  isRunTransition,
  LeaseLost,
  lockAuditLog,
  lockRun,
  releaseForShutdown,
  runEvent,
  terminalRunStatuses,
  type Executor,
  type NewEvent,
  type Run,
  type RunFence,
  type RunPatch,
  type Store,
  type TransitionReads,
  type TransitionWrite,
} from '../store/index.js'
import type { Driver } from './driver.js'
import type { LeaseClock } from './leases.js'

/** How a cancel ends a run: a superseded run's open calls expire, a cancelled one's are cancelled. */
export function cancelEnd(reason: string): RunEnd {
  // docs/architecture.md#the-tool-call-ledger
  return { status: 'cancelled', reason, openCalls: reason === 'superseded' ? 'expired' : 'cancelled' }
}

/**
 * The run writes a driver makes under its lease, and the ends of runs (docs/architecture.md#run-states):
 * every fenced write throws LeaseLost, writing nothing, once the lease has passed to someone else.
 */
export class RunWriter {
  readonly #store: Store
  readonly #bus: CommandBus
  readonly #log: PluginLogger
  readonly #ledger: CallLedger
  readonly #leases: LeaseClock

  constructor(deps: { store: Store; bus: CommandBus; log: PluginLogger; ledger: CallLedger; leases: LeaseClock }) {
    this.#store = deps.store
    this.#bus = deps.bus
    this.#log = deps.log
    this.#ledger = deps.ledger
    this.#leases = deps.leases
  }

  /**
   * One transaction under the run's lease. `audit`: it may end client calls, whose audit entries need
   * the audit lock before any event is appended.
   */
  async fenced<T>(
    fence: RunFence,
    fn: (tx: Executor, run: Run) => Promise<T>,
    options: { audit?: boolean; patch?: RunPatch } = {},
  ): Promise<T> {
    return this.#store.transaction(async (tx) => {
      const run = await this.fence(tx, fence, options.patch)
      if (options.audit) await lockAuditLog(tx)
      return fn(tx, run)
    })
  }

  /** Re-checks (and renews) the lease inside the caller's transaction. */
  async fence(tx: Executor, fence: RunFence, patch?: RunPatch): Promise<Run> {
    const run = await fenceRun(tx, fence.runId, fence.owner, this.#leases.expiry(), patch)
    if (!run) throw new LeaseLost()
    return run
  }

  /** One state change in one statement under the run's lease. */
  async transition(
    fence: RunFence,
    patch: RunPatch,
    writes: TransitionWrite[],
    events: NewEvent[],
    reads?: TransitionReads,
  ): Promise<{ run: Run; reads: { [name: string]: unknown } }> {
    const done = await this.#store.transition(
      { ...fence, expiresAt: this.#leases.expiry() },
      patch,
      writes,
      events,
      reads,
    )
    if (!done) throw new LeaseLost()
    return done
  }

  /**
   * Ends a run: every open call gets its terminal result, pending decisions expire, the run's
   * terminal state and event are written — all before anything else happens in the conversation.
   * With a fence, only while that lease holds (LeaseLost otherwise); without, under the row lock,
   * and `announce` tells a driver elsewhere to stop.
   */
  async end(runId: string, end: RunEnd, options: { fence?: RunFence; announce?: boolean } = {}): Promise<void> {
    const decisions = await this.#store.transaction(async (tx) => {
      const run = options.fence ? await this.fence(tx, options.fence) : await lockRun(tx, runId)
      if (!run || terminalRunStatuses.includes(run.status)) return []
      // The run may have moved on since the caller looked (the sweeper saw it waiting; an answer has
      // since continued it): an end the state table does not allow from here is not made.
      if (!isRunTransition(run.status, end.status)) {
        this.#log.info('a run moved on before it could end; left as it is', {
          runId,
          status: run.status,
          end: end.status,
        })
        return []
      }
      await lockAuditLog(tx)
      const expire = await this.#ledger.end(tx, run, end)
      if (options.announce) await announceRunEnded(tx, runId)
      return expire
    })
    this.#bus.decisionsExpired(decisions)
  }

  /**
   * The driver was stopped. Cancelled: the run ends cancelled (partial text kept). Shutdown: the round
   * is checkpointed and the lease released, for the next server to resume. Lease lost: nothing is
   * written — the run belongs to someone else now.
   */
  async endAborted(run: Run, driver: Driver, messageId: string | null, text: string): Promise<void> {
    const reason = String(driver.loop.signal.reason ?? 'cancelled')
    if (reason === 'lease_lost') throw new LeaseLost()
    if (reason === 'shutdown') {
      await this.fenced(driver.fence, (tx, locked) =>
        releaseForShutdown(tx, locked, messageId ? { messageId, text } : null),
      )
      return
    }
    const decisions = await this.fenced(
      driver.fence,
      async (tx, locked) => {
        if (messageId) {
          await completeAssistantMessage(tx, messageId, text, null, 'cancelled')
          await appendEvents(tx, [
            runEvent(locked, 'message.completed', { messageId, content: text, toolCalls: null, status: 'cancelled' }),
          ])
        }
        return this.#ledger.end(tx, locked, cancelEnd(reason))
      },
      { audit: true },
    )
    this.#bus.decisionsExpired(decisions)
  }

  /** Decisions of an ended run can no longer be answered. */
  async expireDecisions(decisionIds: string[]): Promise<void> {
    for (const decisionId of decisionIds) {
      await this.#bus
        .expireDecision(decisionId)
        .catch((error: unknown) =>
          this.#log.warn('could not expire a decision of an ended run', { decisionId, err: error }),
        )
    }
  }
}
