import { KeyTaken, type DispatchRecord, type Executor, type Store } from '../store/index.js'
import {
  insertRequested,
  recordStarted,
  recordStep,
  type AuditEnvelope,
  type EnvelopeChange,
} from './audit-envelope.js'
import type { BusError, DispatchHooks, DispatchOutcome } from './bus-types.js'
import { toJsonError } from './outcomes.js'

/** The `running` step of a dispatch. */
export type StartChange = EnvelopeChange & {
  status: 'running'
  risk: string
  executor: { id: string; expiresAt: Date }
}

/**
 * One dispatch's audit trail as it is written (docs/architecture.md#the-command-bus): the envelope as
 * it now stands, and each step's transaction, which also writes the dispatch row (with its
 * `requested` entry) the first time, and runs the caller's `within` hooks.
 */
export class DispatchRecorder {
  readonly dispatch: DispatchRecord
  readonly hooks: DispatchHooks | undefined
  readonly #store: Store
  #envelope: AuditEnvelope
  #persisted: boolean

  constructor(
    store: Store,
    dispatch: DispatchRecord,
    envelope: AuditEnvelope,
    options: { hooks?: DispatchHooks; persisted?: boolean } = {},
  ) {
    this.#store = store
    this.dispatch = dispatch
    this.#envelope = envelope
    this.hooks = options.hooks
    this.#persisted = options.persisted ?? false
  }

  /** The envelope after the last step recorded. */
  get envelope(): AuditEnvelope {
    return this.#envelope
  }

  /** A step recorded inside `step`'s transaction moved the envelope on. */
  advance(envelope: AuditEnvelope): void {
    this.#envelope = envelope
  }

  /** A transaction of the dispatch: the caller's locks first, then (the first time) the dispatch row. */
  async step<T>(fn: (tx: Executor) => Promise<T>): Promise<T> {
    const result = await this.#store.transaction(async (tx) => {
      await this.hooks?.lock?.(tx)
      if (!this.#persisted) {
        // The row and its `requested` entry are written with the next step, saving a commit.
        if (!(await insertRequested(tx, this.dispatch, this.#envelope))) throw new KeyTaken()
        await this.hooks?.persisted?.(tx)
      }
      return fn(tx)
    })
    this.#persisted = true
    return result
  }

  /** Records one step (`gated`, …) in its own transaction. */
  async record(step: string, change: EnvelopeChange): Promise<void> {
    this.#envelope = await this.step((tx) => recordStep(tx, step, this.#envelope, this.dispatch, change))
  }

  /** Ends a dispatch that never ran, with the caller's `settled` in the same transaction. */
  async refuse(status: 'failed' | 'rejected', error: BusError): Promise<DispatchOutcome> {
    const outcome: DispatchOutcome = { status, dispatchId: this.dispatch.id, error }
    await this.step(async (tx) => {
      await recordStep(tx, 'finished', this.#envelope, this.dispatch, {
        status,
        error: toJsonError(error),
        finishedAt: new Date().toISOString(),
      })
      await this.hooks?.settled?.(tx, outcome)
    })
    return outcome
  }

  /**
   * The `running` step. A dispatch not yet written (it runs at once) is recorded in one statement, with
   * a driver's call's part; one already written (a person approved it) moves on in a transaction, where
   * `announce` writes what goes with it (an approved call's `tool_call.started`).
   */
  async start(change: StartChange, announce?: (tx: Executor) => Promise<void>): Promise<AuditEnvelope> {
    if (!this.#persisted) {
      const part = this.hooks?.startTogether?.()
      const started = await recordStarted(this.#store, this.dispatch, this.#envelope, change, part)
      if (started === 'lost') throw part!.lost()
      if (started === 'key_taken') throw new KeyTaken()
      this.#persisted = true
      this.#envelope = started
      return started
    }
    this.#envelope = await this.step(async (tx) => {
      const next = await recordStep(tx, 'running', this.#envelope, this.dispatch, change)
      await announce?.(tx)
      return next
    })
    return this.#envelope
  }
}
