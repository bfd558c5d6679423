import { randomUUID } from 'node:crypto'
import type { CommandBus, DecisionView, DispatchOutcome } from '../cmdbus/index.js'
import type { JsonValue, PluginLogger } from '../extension/index.js'
import type { ModelRegistry } from '../llm/index.js'
import type { Retriever } from '../rag/index.js'
import { runView } from '../resources/index.js'
import {
  activeRunStatuses,
  announceRunEnded,
  countActiveRunsOf,
  appendEvents,
  completeAssistantMessage,
  createRun,
  fenceRun,
  getProject,
  getRun,
  isUniqueViolation,
  listRuns,
  listToolCalls,
  lockAuditLog,
  lockRun,
  nextQueuedRun,
  nextQueuedRunAfterEnd,
  pendingDecisionIds,
  releaseLease,
  runEvent,
  terminalRunStatuses,
  isRunTransition,
  updateRun,
  type Conversation,
  type Executor,
  type ModelParams,
  type NewRun,
  type Project,
  type Run,
  type RunFence,
  type RunProfile,
  type RunPatch,
  type Store,
  type ToolCallStatus,
  type Prefetched,
} from '../store/index.js'
import { resolveClientTools } from './client-tools.js'
import { ModelSlots } from './model-slots.js'
import { LeaseLost, type Driver, type DriverKit, type StopReason } from './driver.js'
import { RunSweeper } from './run-sweeper.js'
import { transcriptBudget } from './transcript-window.js'
import { driveRun } from './run-loop.js'
import { commandTools } from './tool-table.js'
import { RunRequestError } from './run-errors.js'
import { RunLedger, openStatuses, type RunEnd } from './run-ledger.js'
import type { RunObserver } from './run-observer.js'

export type { RunObserver } from './run-observer.js'

export interface RunManagerOptions {
  /** Metrics hooks. */
  observer?: RunObserver
  store: Store
  bus: CommandBus
  models: ModelRegistry
  log: PluginLogger
  /** Bytes of a tool result the model reads (PLINTH_TOOL_OUTPUT_LIMIT). */
  toolOutputLimit?: number
  /** A running run's lease (PLINTH_RUN_LEASE); a run whose lease ran out is resumed by a sweeper. */
  leaseMs?: number
  /** Extra system-prompt text (plugin notes are added automatically). */
  systemPrompt?: string
  /** Model calls in flight across all runs. */
  maxConcurrentModelCalls?: number
  /** Of those, what one user may hold (default: half, rounded up), so other users always find room. */
  maxConcurrentModelCallsPerUser?: number
  /** Runs one user may have queued or running at once, on every instance together (default 10). */
  maxActiveRunsPerUser?: number
  /** A run waiting longer than this for humans or client tools ends `expired` (PLINTH_ACTION_TTL). */
  actionTtlMs?: number
  /**
   * The database belongs to this process alone (embedded PGlite): at start, every `running` run is
   * an orphan of a previous process and is resumed at once instead of after its lease.
   */
  exclusiveDatabase?: boolean
  /** Project knowledge put in front of the model at the start of a run (off without it). */
  retriever?: Retriever
  /** Automatic resumes of one run (after crashes or shutdowns) before it ends `failed` `interrupted`. */
  maxResumes?: number
  /** How long a graceful stop lets tool calls in flight finish before aborting them (PLINTH_SHUTDOWN_GRACE). */
  shutdownGraceMs?: number
}

export interface CreateRunInput {
  input: string
  model?: string
  clientTools?: unknown
  maxIterations?: number
  ifActive?: 'interrupt' | 'enqueue'
  approvalPolicy?: 'ask' | 'dontAsk'
  /** `autoInject: false` keeps project knowledge out of the prompt (the tool still searches it). */
  knowledge?: { autoInject?: boolean }
  /** Override the project's (and the model's configured) parameters for this run. */
  modelParams?: ModelParams
}

/**
 * Runs the agent's ReAct loop (docs/architecture.md#the-run-loop): stream the model, dispatch its tool
 * calls through the command bus, pause for humans, continue, finish. Every state change is written (with
 * its event) before it is announced; every tool call ends with exactly one terminal result. The process
 * holding a run's lease is its only writer: each of its writes is fenced by the lease, so a driver whose
 * lease passed to another instance (or whose run was cancelled elsewhere) changes nothing and stops.
 */
/** Failures a run can be resumed from: upstream trouble, an interruption, a model configured again. */
const resumableCodes = [
  'upstream_error',
  'upstream_auth_missing',
  'timeout',
  'interrupted',
  'tools_unsupported',
  'unknown_model',
]

export class RunManager {
  readonly #options: RunManagerOptions
  readonly #instanceId = randomUUID()
  #leaseSeq = 0
  readonly #drivers = new Map<string, Driver>()
  /** Cancel signals of waiting runs, for handlers that run after a human approved. */
  readonly #waiting = new Map<string, AbortController>()
  readonly #ledger: RunLedger
  readonly #sweeper: RunSweeper
  #unsubscribe: Array<() => void> = []
  #stopping = false
  readonly #modelSlots: ModelSlots
  /** What the round's steps (model turn, call executor) use of this manager. */
  readonly #kit: DriverKit

  constructor(options: RunManagerOptions) {
    this.#options = options
    this.#modelSlots = new ModelSlots(options.maxConcurrentModelCalls ?? 16, options.maxConcurrentModelCallsPerUser)
    this.#ledger = new RunLedger(options.bus, options.toolOutputLimit ?? 4096, options.observer)
    this.#kit = {
      store: options.store,
      bus: options.bus,
      models: options.models,
      log: options.log,
      retriever: options.retriever,
      systemPrompt: options.systemPrompt,
      leaseMs: this.#leaseMs(),
      observer: options.observer,
      ledger: this.#ledger,
      modelSlots: this.#modelSlots,
      fenced: (fence, fn, fencedOptions) => this.#fenced(fence, fn, fencedOptions),
      transition: async (fence, patch, writes, events, reads) => {
        const done = await this.#options.store.transition(
          { ...fence, expiresAt: this.#expiry() },
          patch,
          writes,
          events,
          reads,
        )
        if (!done) throw new LeaseLost()
        return done
      },
      endAborted: (run, driver, messageId, text) => this.#endAborted(run, driver, messageId, text),
      expireDecisions: (decisionIds) => this.#expireDecisions(decisionIds),
      expiry: () => this.#expiry(),
      end: (runId, end, endOptions) => this.#end(runId, end, endOptions),
      abort: (driver, reason) => this.#abort(driver, reason),
    }
    this.#sweeper = new RunSweeper({
      store: options.store,
      bus: options.bus,
      log: options.log,
      maxResumes: options.maxResumes,
      actionTtlMs: options.actionTtlMs,
      stopping: () => this.#stopping,
      isDriven: (runId) => this.#drivers.has(runId),
      newLease: () => this.#newLease(),
      drive: (runId, owner) => this.#spawn(runId, owner, { resumed: true }),
      end: (runId, end, endOptions) => this.#end(runId, end, endOptions),
      startNext: (conversationId) => this.#startNext(conversationId),
      resumeIfAnswered: (runId) => this.#resumeIfAnswered(runId),
    })
  }

  /** Binds to the bus and run signals, recovers what a previous process left, starts the sweeper. */
  async start(): Promise<void> {
    const { bus, store, log } = this.#options
    bus.bindRuns({
      lock: async (tx, runId) => {
        await lockRun(tx, runId)
      },
      settle: (tx, decision, outcome) => this.#settleDecision(tx, decision, outcome),
      signal: (runId) => this.#waitSignal(runId),
      started: (tx, decision) => this.#decisionStarted(tx, decision),
    })
    this.#unsubscribe.push(
      bus.onDecisionResolved((decision) => {
        if (!decision.runId) return
        this.#afterDecision(decision.runId).catch((error: unknown) =>
          log.error('could not continue a run after a decision', { runId: decision.runId, err: error }),
        )
      }),
      store.runs.subscribe((runId) => this.#onRunEndedElsewhere(runId)),
      // A run whose owner can no longer see its conversation stops calling the model at once.
      store.access.subscribe(() => this.#recheckAccess()),
    )
    const recheck = setInterval(() => this.#recheckAccess(), 60_000)
    recheck.unref()
    this.#unsubscribe.push(() => clearInterval(recheck))
    // Dispatches first: a resumed run's interrupted tool call then finds its dispatch ended too.
    await bus.sweepOrphanedDispatches({ all: this.#options.exclusiveDatabase === true })
    const swept = await this.sweep({ orphansOnly: this.#options.exclusiveDatabase === true })
    if (swept.resumed > 0)
      log.info(`resumed ${swept.resumed} runs`, {
        resumed: swept.resumed,
        outcome: 'continuing from their last checkpoint',
      })
    if (swept.failed > 0)
      log.warn(`ended ${swept.failed} runs that could not resume`, {
        failed: swept.failed,
        outcome: 'failed (interrupted); resume with POST /api/runs/:id/resume',
      })
    this.#sweeper.start(Math.max(1000, this.#leaseMs() / 2))
  }

  /**
   * Graceful stop: takes no new runs, stops model calls at once, lets tool calls in flight finish
   * (up to the grace period), checkpoints every driven run and releases its lease, so the restarted
   * server (or another instance) resumes it.
   */
  async stop(): Promise<void> {
    this.#stopping = true
    this.#sweeper.stop()
    for (const unsubscribe of this.#unsubscribe) unsubscribe()
    this.#unsubscribe = []
    for (const driver of this.#drivers.values()) driver.loop.abort('shutdown')
    const grace = setTimeout(() => {
      for (const driver of this.#drivers.values()) driver.calls.abort('shutdown')
    }, this.#options.shutdownGraceMs ?? 10_000)
    await Promise.allSettled([...this.#drivers.values()].map((driver) => driver.done))
    clearTimeout(grace)
    // The bus stays bound: a decision answered before the server stops listening must still reach
    // its run's ledger (in the bus's transaction); the next server's sweeper continues that run.
  }

  get models(): ModelRegistry {
    return this.#options.models
  }

  /** Creates a run for a user message; `{active}` when another run is active and `ifActive` is unset. */
  async createRun(
    conversation: Conversation,
    userId: string,
    input: CreateRunInput,
    hooks: { onCreated?: (tx: Executor, run: Run) => Promise<void>; project?: Project } = {},
  ): Promise<{ run: Run } | { active: Run }> {
    if (this.#stopping) throw new RunRequestError('shutting_down', 'the server is shutting down; try again in a moment')
    const { models } = this.#options
    // The caller usually read the project with the conversation (one query); otherwise read it here.
    const project =
      hooks.project?.id === conversation.projectId
        ? hooks.project
        : await getProject(this.#options.store, conversation.projectId)
    // The project's default model, unless the operator has since removed it from the configuration.
    const projectModel = project?.defaultModel && models.get(project.defaultModel) ? project.defaultModel : undefined
    const model = input.model ?? projectModel ?? models.defaultId
    if (!models.get(model))
      throw new RunRequestError('unknown_model', `no model ${JSON.stringify(model)}; GET /api/models lists them`)
    const profile: RunProfile = {
      systemPrompt: project?.systemPrompt ?? null,
      modelParams: { ...project?.modelParams, ...input.modelParams },
      tools: project?.tools ?? null,
      ...(project && { injectFrom: { projectOwnerId: project.ownerId, members: project.injectMemberKnowledge } }),
    }
    const clientTools = resolveClientTools(input.clientTools)
    // A client tool must not take the name of a command tool: the model would call one thinking it the other.
    const byToolName = new Map(
      [...commandTools(this.#options.bus, profile.tools)].map((entry) => [entry.toolName, entry.commandId]),
    )
    for (const tool of clientTools) {
      const commandId = byToolName.get(tool.name)
      if (commandId)
        throw new RunRequestError(
          'client_tool_conflict',
          `the client tool ${JSON.stringify(tool.name)} has the name of the tool of command ${commandId}; rename the client tool`,
        )
    }
    // A user may not crowd the model out for everyone: a cap on their queued and running runs, counted
    // in the database so it holds across instances.
    const cap = this.#options.maxActiveRunsPerUser ?? 10
    if ((await countActiveRunsOf(this.#options.store, userId)) >= cap) {
      throw new RunRequestError(
        'too_many_runs',
        `you have ${cap} runs queued or running (the most one user may have at once); wait for one to finish, or cancel one`,
      )
    }
    const maxIterations = input.maxIterations ?? 10
    const lease = this.#newLease()
    const newRun: NewRun = {
      conversationId: conversation.id,
      projectId: conversation.projectId,
      ownerId: userId,
      model,
      maxIterations,
      approvalPolicy: input.approvalPolicy ?? 'ask',
      clientTools: clientTools as unknown as JsonValue,
      input: input.input,
      ...(input.knowledge?.autoInject === false && { knowledge: { autoInject: false } }),
      profile,
      view: runView,
    }
    const create = (allowQueue: boolean) =>
      this.#options.store.transaction(async (tx) => {
        const result = await createRun(tx, newRun, { allowQueue, lease })
        // In the same transaction, e.g. the Idempotency-Key's record: both or neither.
        if ('run' in result) await hooks.onCreated?.(tx, result.run)
        return result
      })
    // In an idle conversation (the usual case) the run starts in one statement; otherwise, or with
    // something to record in the same transaction, the locking path queues or reports the active run.
    // Its driver's first reads (the transcript window, whether there is knowledge) go with it.
    const alone = hooks.onCreated
      ? undefined
      : await this.#options.store.startRun(newRun, lease, { maxChars: transcriptBudget(models.get(model)!) })
    let created = alone ? { run: alone.run } : await create(input.ifActive === 'enqueue')
    // Interrupt: the new message supersedes everything still pending in the conversation — the queued
    // runs first (so ending the active one promotes none of them), then the active one.
    for (let attempt = 0; 'active' in created && input.ifActive === 'interrupt' && attempt < 5; attempt++) {
      await this.#supersede(conversation.id)
      created = await create(false)
    }
    // The owner of the project may write there (anyone else: the driver asks).
    if ('run' in created && created.run.status === 'running') {
      this.#spawn(created.run.id, lease.owner, {
        run: created.run,
        prefetched: alone?.prefetched,
        ...(project?.ownerId === userId && { writable: true }),
      })
    }
    // A queued run: the active one may have ended between our check and our commit; look again.
    else if ('run' in created) await this.#startNext(conversation.id)
    return created
  }

  /** Ends every queued and active run of a conversation as `superseded`, queued ones first. */
  async #supersede(conversationId: string): Promise<void> {
    const pending = await listRuns(this.#options.store, { conversationId, statuses: activeRunStatuses }, { limit: 200 })
    const queuedFirst = [...pending.items].sort((a, b) => Number(b.status === 'queued') - Number(a.status === 'queued'))
    for (const run of queuedFirst) await this.cancel(run.id, 'superseded')
  }

  /**
   * Cancels a run (idempotent for finished runs) and resolves with the run as it ends. Driven here:
   * its loop is stopped and ends it. Driven by another instance (or waiting): it is ended here under
   * the row lock — which fences the driver out — and a notification makes the driver stop at once.
   */
  async cancel(runId: string, reason = 'cancelled'): Promise<Run | undefined> {
    const { store } = this.#options
    const run = await getRun(store, runId)
    if (!run || terminalRunStatuses.includes(run.status)) return run
    const driver = this.#drivers.get(runId)
    if (driver) {
      this.#abort(driver, reason)
      await driver.done
      const after = await getRun(store, runId)
      if (after && !terminalRunStatuses.includes(after.status))
        await this.#end(runId, this.#cancelEnd(reason), { announce: true })
    } else {
      await this.#end(runId, this.#cancelEnd(reason), { announce: true })
    }
    this.#waiting.get(runId)?.abort(reason)
    return getRun(store, runId)
  }

  #cancelEnd(reason: string): RunEnd {
    // A superseded run's open calls expire, a cancelled one's are cancelled
    // (docs/architecture.md#the-tool-call-ledger).
    return { status: 'cancelled', reason, openCalls: reason === 'superseded' ? 'expired' : 'cancelled' }
  }

  #abort(driver: Driver, reason: StopReason): void {
    driver.loop.abort(reason)
    if (reason !== 'shutdown') driver.calls.abort(reason)
  }

  /**
   * Ends, `cancelled` with reason `access_revoked`, every run driven here whose owner may no longer see
   * its conversation (removed from a shared project, the project or conversation deleted, the user
   * disabled). Called on every access announcement and once a minute for adapters that change silently.
   */
  #recheckAccess(): void {
    const { store, bus, log } = this.#options
    for (const runId of this.#drivers.keys()) {
      void (async () => {
        const run = await getRun(store, runId)
        if (!run || terminalRunStatuses.includes(run.status)) return
        if (await bus.maySee(run.ownerId, run.conversationId)) return
        log.info('run ended: its owner lost access to the conversation', { runId })
        await this.cancel(runId, 'access_revoked')
      })().catch((error: unknown) => log.warn('could not re-check a run’s access', { runId, err: error }))
    }
  }

  /** Another instance ended a run (null: any run, after a reconnect): drivers here that lost it stop. */
  #onRunEndedElsewhere(runId: string | null): void {
    const check = async (id: string): Promise<void> => {
      const driver = this.#drivers.get(id)
      const waiting = this.#waiting.get(id)
      if (!driver && !waiting) return
      const run = await getRun(this.#options.store, id)
      if (driver && (!run || run.status !== 'running' || run.leaseOwner !== driver.fence.owner))
        this.#abort(driver, 'lease_lost')
      if (waiting && (!run || terminalRunStatuses.includes(run.status))) waiting.abort('cancelled')
    }
    const ids = runId ? [runId] : [...new Set([...this.#drivers.keys(), ...this.#waiting.keys()])]
    for (const id of ids)
      check(id).catch((error: unknown) =>
        this.#options.log.warn('could not check a run another instance ended', { runId: id, err: error }),
      )
  }

  /**
   * Resolves with the run once it has ended or needs action (or, after `timeoutMs`, as it is then):
   * create-and-wait for scripts and clients that do not stream.
   */
  async waitUntilSettled(
    runId: string,
    timeoutMs: number,
    options: { signal?: AbortSignal } = {},
  ): Promise<{ run: Run; settled: boolean }> {
    const { store } = this.#options
    const isSettled = (run: Run): boolean =>
      terminalRunStatuses.includes(run.status) || run.status === 'requires_action'
    let wake: (() => void) | null = null
    const unsubscribe = store.feed.subscribe(`run:${runId}`, (event) => {
      if (event.type === 'run.status' || event.type.startsWith('run.')) wake?.()
    })
    // An aborted wait (the caller's access was revoked, the server stops) answers the run as it is.
    const onAbort = (): void => wake?.()
    options.signal?.addEventListener('abort', onAbort)
    const deadline = Date.now() + timeoutMs
    try {
      for (;;) {
        const run = await getRun(store, runId)
        if (!run) throw new Error(`run ${runId} vanished`)
        if (isSettled(run)) return { run, settled: true }
        const remaining = deadline - Date.now()
        if (remaining <= 0 || options.signal?.aborted) return { run, settled: false }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.min(remaining, 1000))
          wake = () => {
            clearTimeout(timer)
            resolve()
          }
        })
        wake = null
      }
    } finally {
      unsubscribe()
      options.signal?.removeEventListener('abort', onAbort)
    }
  }

  /** Client-tool results (docs/guides/agent-runs.md, "Client tools"); throws RunRequestError `run_not_waiting` for calls that are not awaited. */
  async submitToolOutputs(runId: string, outputs: Array<{ callId: string; output: unknown }>): Promise<Run> {
    const { store } = this.#options
    const run = await getRun(store, runId)
    if (!run) throw new RunRequestError('run_not_waiting', 'run not found')
    if (run.status !== 'requires_action')
      throw new RunRequestError('run_not_waiting', `the run is ${run.status}, not waiting for tool outputs`)
    const calls = await listToolCalls(store, runId)
    for (const output of outputs) {
      const call = calls.find((candidate) => candidate.id === output.callId)
      if (!call || call.status !== 'awaiting_output')
        throw new RunRequestError('run_not_waiting', `call ${output.callId} is not waiting for an output`)
    }
    await store.transaction(async (tx) => {
      const locked = await lockRun(tx, runId)
      if (!locked || locked.status !== 'requires_action') return
      await lockAuditLog(tx)
      for (const output of outputs) {
        const call = calls.find((candidate) => candidate.id === output.callId)!
        const value = (output.output ?? null) as JsonValue
        const accepted =
          typeof value === 'object' && value !== null && !Array.isArray(value) ? value.accepted : undefined
        const status: ToolCallStatus =
          accepted === false ? ((value as { rejected?: unknown }).rejected ? 'rejected' : 'error') : 'ok'
        await this.#ledger.finish(tx, locked, call, status, value)
      }
    })
    await this.#resumeIfAnswered(runId)
    return (await getRun(store, runId)) ?? run
  }

  /** See RunSweeper.sweep. */
  sweep(options: { orphansOnly?: boolean } = {}): Promise<{ resumed: number; failed: number }> {
    return this.#sweeper.sweep(options)
  }

  /**
   * Resumes a run that failed upstream (or was interrupted) from its last checkpoint: the transcript
   * already holds every finished round, so no completed tool call runs again.
   */
  async resume(runId: string): Promise<Run> {
    const { store } = this.#options
    if (this.#stopping) throw new RunRequestError('shutting_down', 'the server is shutting down; try again in a moment')
    const lease = this.#newLease()
    let resumed: Run
    try {
      // A refusal thrown here rolls back a transaction that has written nothing.
      resumed = await store.transaction(async (tx) => {
        const run = await lockRun(tx, runId)
        if (!run) throw new RunRequestError('run_not_resumable', 'run not found')
        const code = (run.error as { code?: string } | null)?.code
        if (run.status !== 'failed' || !resumableCodes.includes(code ?? '')) {
          throw new RunRequestError(
            'run_not_resumable',
            `only a run that failed upstream or was interrupted can be resumed (this one is ${run.status}${code ? `: ${code}` : ''})`,
          )
        }
        if (!this.#options.models.get(run.model))
          throw new RunRequestError(
            'unknown_model',
            `model ${run.model} is not configured; configure it again, then resume`,
          )
        const updated = await updateRun(tx, runId, {
          move: { from: ['failed'], to: 'running' },
          phase: 'thinking',
          error: null,
          lease,
        })
        await appendEvents(tx, [
          runEvent(updated, 'run.status', { runId, status: updated.status, phase: updated.phase }),
        ])
        return updated
      })
    } catch (error) {
      // Only the one-active-run index means another run is active; anything else is a refusal or a real failure.
      if (!isUniqueViolation(error)) throw error
      throw new RunRequestError('run_active', 'another run is active in this conversation')
    }
    this.#spawn(runId, lease.owner)
    return resumed
  }

  // --- the loop ------------------------------------------------------------------------------

  /** Starts the conversation's oldest queued run when nothing else there is active. */
  async #startNext(conversationId: string): Promise<void> {
    if (this.#stopping) return // the next server (or another instance) starts it
    const queued = await nextQueuedRun(this.#options.store, conversationId)
    if (queued) await this.#startQueued(queued)
  }

  /** Starts a queued run unless something else started it (or another run) first. */
  async #startQueued(queued: Run): Promise<void> {
    const { store } = this.#options
    if (this.#stopping) return
    const lease = this.#newLease()
    let started: Run | undefined
    try {
      started = await store.transaction(async (tx) => {
        const locked = await lockRun(tx, queued.id)
        if (!locked || locked.status !== 'queued') return undefined
        const run = await updateRun(tx, queued.id, {
          move: { from: ['queued'], to: 'running' },
          phase: 'thinking',
          started: true,
          lease,
        })
        await appendEvents(tx, [runEvent(run, 'run.status', { runId: run.id, status: run.status, phase: run.phase })])
        return run
      })
    } catch (error) {
      // The one-active-run index refused: another run became active first, and it starts this one when it ends.
      if (!isUniqueViolation(error)) throw error
    }
    if (started) this.#spawn(started.id, lease.owner, { run: started })
  }

  #spawn(
    runId: string,
    owner: string,
    hints: { resumed?: boolean; writable?: boolean; run?: Run; prefetched?: Prefetched } = {},
  ): void {
    const { store, log } = this.#options
    const fence = { runId, owner }
    if (this.#stopping) {
      // Not driven here after all: give the lease up so the next server resumes the run at once.
      void releaseLease(store, runId, owner).catch((error: unknown) =>
        log.warn('could not release a run lease', { runId, err: error }),
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
    driver.done = driveRun(this.#kit, driver)
      .catch(async (error: unknown) => {
        if (error instanceof LeaseLost) {
          log.info('stopped driving a run that was ended or taken over elsewhere', { runId })
          return
        }
        log.error('run loop failed', { runId, err: error })
        await this.#end(
          runId,
          {
            status: 'failed',
            error: { code: 'internal', message: 'an internal error ended the run' },
            openCalls: 'interrupted',
          },
          { fence },
        ).catch((endError: unknown) => {
          if (!(endError instanceof LeaseLost)) log.error('could not end a failed run', { runId, err: endError })
        })
      })
      .finally(async () => {
        this.#drivers.delete(runId)
        try {
          const queued = this.#stopping ? undefined : await nextQueuedRunAfterEnd(store, runId)
          if (queued) await this.#startQueued(queued)
        } catch (error) {
          log.warn('could not start the next queued run', { runId, err: error })
        }
      })
  }

  /**
   * One transaction under the run's lease; throws LeaseLost (writing nothing) when the lease has passed.
   * `audit`: it may end client calls, whose audit entries need the audit lock before any event is appended.
   */
  async #fenced<T>(
    fence: RunFence,
    fn: (tx: Executor, run: Run) => Promise<T>,
    options: { audit?: boolean; patch?: RunPatch } = {},
  ): Promise<T> {
    return this.#options.store.transaction(async (tx) => {
      const run = await this.#fence(tx, fence, options.patch)
      if (options.audit) await lockAuditLog(tx)
      return fn(tx, run)
    })
  }

  async #fence(tx: Executor, fence: RunFence, patch?: RunPatch): Promise<Run> {
    const run = await fenceRun(tx, fence.runId, fence.owner, this.#expiry(), patch)
    if (!run) throw new LeaseLost()
    return run
  }

  /**
   * A decision about one of a run's calls, inside the bus's transaction that records it: the call's
   * result is written there, so an executed call can never end up marked otherwise. A decision that
   * expired while its run waited ends the run `expired` (docs/architecture.md#run-states).
   */
  async #settleDecision(tx: Executor, decision: DecisionView, outcome: DispatchOutcome | null): Promise<void> {
    const runId = decision.runId!
    const run = await lockRun(tx, runId)
    if (!run || terminalRunStatuses.includes(run.status)) return
    const call = (await listToolCalls(tx, runId)).find((candidate) => candidate.decisionId === decision.id)
    if (!call || call.status !== 'awaiting_decision') return
    if (decision.status === 'expired' || !outcome) {
      if (run.status === 'requires_action') {
        await this.#ledger.end(tx, run, { status: 'expired', openCalls: 'expired' })
        return
      }
      await this.#ledger.finish(tx, run, call, 'expired', { accepted: false, expired: true })
    } else if (decision.status === 'rejected') {
      await this.#ledger.finish(tx, run, call, 'rejected', { accepted: false, rejected: true })
    } else {
      await this.#ledger.applyOutcome(tx, run, call, outcome)
    }
    if (run.status === 'requires_action') {
      const requiredAction = await this.#ledger.requiredAction(tx, runId)
      const updated = await updateRun(tx, runId, { requiredAction })
      // Still waiting, for less: not a new `run.requires_action` for webhooks.
      await appendEvents(tx, [
        {
          ...runEvent(updated, 'run.status', { runId, status: updated.status, phase: null, requiredAction }),
          webhook: false,
        },
      ])
    }
  }

  /** An approved call of a run begins running: announced now, not when the call first asked for a decision. */
  async #decisionStarted(tx: Executor, decision: DecisionView): Promise<void> {
    const run = await getRun(tx, decision.runId!)
    if (!run || terminalRunStatuses.includes(run.status)) return
    const call = (await listToolCalls(tx, run.id)).find((candidate) => candidate.decisionId === decision.id)
    if (call) await appendEvents(tx, [runEvent(run, 'tool_call.started', { callId: call.id })])
  }

  /** After a decision committed: continue the run once nothing is awaited, or tidy up after it ended. */
  async #afterDecision(runId: string): Promise<void> {
    const run = await getRun(this.#options.store, runId)
    if (!run) return
    if (terminalRunStatuses.includes(run.status)) {
      this.#waiting.delete(runId)
      await this.#expireDecisions(await pendingDecisionIds(this.#options.store, runId))
      await this.#startNext(run.conversationId)
      return
    }
    await this.#resumeIfAnswered(runId)
  }

  /** The cancel signal of a waiting run, for a command a human approved. */
  #waitSignal(runId: string): AbortSignal {
    let controller = this.#waiting.get(runId)
    if (!controller || controller.signal.aborted) {
      controller = new AbortController()
      this.#waiting.set(runId, controller)
    }
    return controller.signal
  }

  async #resumeIfAnswered(runId: string): Promise<void> {
    const { store } = this.#options
    const lease = this.#stopping ? null : this.#newLease()
    const resumed = await store.transaction(async (tx) => {
      const run = await lockRun(tx, runId)
      if (!run || run.status !== 'requires_action') return undefined
      const open = (await listToolCalls(tx, runId)).filter((call) => openStatuses.includes(call.status))
      if (open.length > 0) return undefined
      // Stopping: the run continues with no lease, so the next sweeper (here after a restart, or elsewhere) drives it.
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
    if (!resumed) return
    this.#waiting.delete(runId)
    if (lease) this.#spawn(runId, lease.owner)
  }

  /**
   * The driver was stopped. Cancelled: the run ends cancelled (partial text kept). Shutdown: the round
   * is checkpointed and the lease released, for the next server to resume. Lease lost: nothing is
   * written — the run belongs to someone else now.
   */
  async #endAborted(run: Run, driver: Driver, messageId: string | null, text: string): Promise<void> {
    const reason = String(driver.loop.signal.reason ?? 'cancelled')
    if (reason === 'lease_lost') throw new LeaseLost()
    if (reason === 'shutdown') {
      await this.#fenced(driver.fence, async (tx, locked) => {
        if (messageId) {
          await completeAssistantMessage(tx, messageId, text, null, 'interrupted')
          await appendEvents(tx, [
            runEvent(locked, 'message.completed', { messageId, content: text, toolCalls: null, status: 'interrupted' }),
          ])
        }
        // The cut-off round is asked again on resume.
        await updateRun(tx, run.id, { lease: null, ...(messageId && { iteration: Math.max(0, locked.iteration - 1) }) })
      })
      return
    }
    const decisions = await this.#fenced(
      driver.fence,
      async (tx, locked) => {
        if (messageId) {
          await completeAssistantMessage(tx, messageId, text, null, 'cancelled')
          await appendEvents(tx, [
            runEvent(locked, 'message.completed', { messageId, content: text, toolCalls: null, status: 'cancelled' }),
          ])
        }
        return this.#ledger.end(tx, locked, this.#cancelEnd(reason))
      },
      { audit: true },
    )
    await this.#expireDecisions(decisions)
  }

  /**
   * Ends a run: every open call gets its terminal result, pending decisions expire, the run's
   * terminal state and event are written — all before anything else happens in the conversation.
   * With a fence, only while that lease holds (LeaseLost otherwise); without, under the row lock,
   * and `announce` tells a driver elsewhere to stop.
   */
  async #end(runId: string, end: RunEnd, options: { fence?: RunFence; announce?: boolean } = {}): Promise<void> {
    const decisions = await this.#options.store.transaction(async (tx) => {
      const run = options.fence ? await this.#fence(tx, options.fence) : await lockRun(tx, runId)
      if (!run || terminalRunStatuses.includes(run.status)) return []
      // The run may have moved on since the caller looked (the sweeper saw it waiting; an answer has
      // since continued it): an end the state table does not allow from here is not made.
      if (!isRunTransition(run.status, end.status)) {
        this.#options.log.info('a run moved on before it could end; left as it is', {
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
    await this.#expireDecisions(decisions)
  }

  /** Decisions of an ended run can no longer be answered. */
  async #expireDecisions(decisionIds: string[]): Promise<void> {
    for (const decisionId of decisionIds) {
      await this.#options.bus
        .expireDecision(decisionId)
        .catch((error: unknown) =>
          this.#options.log.warn('could not expire a decision of an ended run', { decisionId, err: error }),
        )
    }
  }

  #leaseMs(): number {
    return this.#options.leaseMs ?? 30_000
  }

  #expiry(): Date {
    return new Date(Date.now() + this.#leaseMs())
  }

  /** A new fencing token: one per acquisition, so even this process's own stale driver is fenced out. */
  #newLease(): { owner: string; expiresAt: Date } {
    return { owner: `${this.#instanceId}.${++this.#leaseSeq}`, expiresAt: this.#expiry() }
  }
}
