import type { PluginLogger } from '../extension/index.js'
import {
  continueAnsweredRun,
  isDatabaseUnavailable,
  LeaseLost,
  nextQueuedRun,
  nextQueuedRunAfterEnd,
  releaseLease,
  startQueuedRun,
  type Prefetched,
  type Run,
  type Store,
} from '../store/index.js'
import type { Driver } from './driver.js'
import type { DriverKit } from './driver-kit.js'
import type { LeaseClock } from './leases.js'
import { driveRun } from './run-loop.js'
import { inSpan } from '../telemetry/index.js'
import type { RunWriter } from './run-writer.js'

/** What starting a driver may already know, so its first round need not read it. */
export interface DriverHints {
  /** Taken over from a stopped driver: calls of its last round may still be open. */
  resumed?: boolean
  writable?: boolean
  run?: Run
  prefetched?: Prefetched
}

/**
 * The runs this process drives (docs/architecture.md#the-run-loop): it starts a driver for a run
 * whose lease it took — a new run, the next queued one, a waiting run whose calls are all answered,
 * one taken over — and, when a driver stops, starts the conversation's next queued run.
 */
export class DriverPool {
  readonly #drivers = new Map<string, Driver>()
  #ended = 0
  #stopping = false
  readonly #store: Store
  readonly #log: PluginLogger
  readonly #leases: LeaseClock
  readonly #writer: RunWriter
  readonly #kit: DriverKit

  constructor(kit: DriverKit) {
    this.#kit = kit
    this.#store = kit.store
    this.#log = kit.log
    this.#leases = kit.leases
    this.#writer = kit.writer
  }

  get stopping(): boolean {
    return this.#stopping
  }

  isDriven(runId: string): boolean {
    return this.#drivers.has(runId)
  }

  driver(runId: string): Driver | undefined {
    return this.#drivers.get(runId)
  }

  /** How many runs this process drives now. */
  get size(): number {
    return this.#drivers.size
  }

  /** Drives ended since this process started: to completion, to a wait, or stopped. */
  get endedCount(): number {
    return this.#ended
  }

  drivenRunIds(): string[] {
    return [...this.#drivers.keys()]
  }

  /** From now on nothing more is started here (the next server, or another instance, starts it). */
  refuseNew(): void {
    this.#stopping = true
  }

  /**
   * Graceful stop: starts nothing more, stops model calls at once, lets tool calls in flight finish
   * (up to `graceMs`), and resolves when every driver has checkpointed and released its lease.
   */
  async stop(graceMs: number): Promise<void> {
    this.refuseNew()
    for (const driver of this.#drivers.values()) driver.loop.abort('shutdown')
    const grace = setTimeout(() => {
      for (const driver of this.#drivers.values()) driver.calls.abort('shutdown')
    }, graceMs)
    await Promise.allSettled([...this.#drivers.values()].map((driver) => driver.done))
    clearTimeout(grace)
  }

  /** Starts the conversation's oldest queued run when nothing else there is active. */
  async startNext(conversationId: string): Promise<void> {
    if (this.#stopping) return // the next server (or another instance) starts it
    const queued = await nextQueuedRun(this.#store, conversationId)
    if (queued) await this.startQueued(queued)
  }

  /** Starts a queued run unless something else started it (or another run) first. */
  async startQueued(queued: Run): Promise<void> {
    if (this.#stopping) return
    const lease = this.#leases.newLease()
    const started = await startQueuedRun(this.#store, queued.id, lease)
    if (started) this.spawn(started.id, lease.owner, { run: started })
  }

  /** Continues a waiting run once none of its calls is open. */
  async resumeIfAnswered(runId: string): Promise<void> {
    const lease = this.#stopping ? null : this.#leases.newLease()
    if (!(await continueAnsweredRun(this.#store, runId, lease))) return
    if (lease) this.spawn(runId, lease.owner)
  }

  /** Drives a run whose lease `owner` holds, until it ends, waits, or the driver is stopped. */
  spawn(runId: string, owner: string, hints: DriverHints = {}): void {
    const fence = { runId, owner }
    if (this.#stopping) {
      // Not driven here after all: give the lease up so the next server resumes the run at once.
      void releaseLease(this.#store, runId, owner).catch((error: unknown) =>
        this.#log.warn('could not release a run lease', { runId, err: error }),
      )
      return
    }
    const driver: Driver = {
      fence,
      resumed: hints.resumed ?? false,
      writable: hints.writable,
      initial: hints.run,
      prefetched: hints.prefetched,
      loop: new AbortController(),
      calls: new AbortController(),
      done: Promise.resolve(),
    }
    this.#drivers.set(runId, driver)
    // One span per drive: a run that waits for a person and goes on later is driven again (docs/guides/operating.md#tracing).
    driver.done = inSpan(
      'invoke_agent',
      {
        'gen_ai.operation.name': 'invoke_agent',
        'gen_ai.agent.name': 'plinth',
        'plinth.run.id': runId,
        'plinth.run.resumed': driver.resumed,
      },
      () => driveRun(this.#kit, driver),
    )
      .catch((error: unknown) => this.#failed(driver, error))
      .finally(() => this.#stopped(runId))
  }

  /** The loop threw: the run ends failed, unless its lease had already passed or the database went away. */
  async #failed(driver: Driver, error: unknown): Promise<void> {
    const { runId } = driver.fence
    if (error instanceof LeaseLost) {
      this.#log.info('stopped driving a run that was ended or taken over elsewhere', { runId })
      return
    }
    if (isDatabaseUnavailable(error)) {
      // Not the run's fault: like a crash of this driver, the run resumes from its last checkpoint once
      // the database is back (here or on another instance), instead of ending failed.
      this.#log.warn('lost the database while driving a run; it resumes from its last checkpoint', {
        runId,
        err: error,
      })
      await releaseLease(this.#store, runId, driver.fence.owner).catch(() => undefined)
      return
    }
    this.#log.error('run loop failed', { runId, err: error })
    await this.#writer
      .end(
        runId,
        {
          status: 'failed',
          error: { code: 'internal', message: 'an internal error ended the run' },
          openCalls: 'interrupted',
        },
        { fence: driver.fence },
      )
      .catch((endError: unknown) => {
        if (!(endError instanceof LeaseLost)) this.#log.error('could not end a failed run', { runId, err: endError })
      })
  }

  /** A driver stopped: the conversation's next queued run may start. */
  async #stopped(runId: string): Promise<void> {
    this.#drivers.delete(runId)
    this.#ended++
    try {
      const queued = this.#stopping ? undefined : await nextQueuedRunAfterEnd(this.#store, runId)
      if (queued) await this.startQueued(queued)
    } catch (error) {
      this.#log.warn('could not start the next queued run', { runId, err: error })
    }
  }
}
