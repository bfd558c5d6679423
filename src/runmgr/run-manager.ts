import { setTimeout as sleep } from 'node:timers/promises'
import { CallLedger, type CommandBus } from '../cmdbus/index.js'
import type { JsonValue, PluginLogger } from '../extension/index.js'
import { defaultAnswerLimits, type AnswerLimits, type ModelRegistry } from '../llm/index.js'
import type { Retriever } from '../rag/index.js'
import { CompactionError, Compactor, type CompactionSettings } from './compaction.js'
import { runView } from '../resources/index.js'
import {
  activeRunStatuses,
  type CreatedRun,
  getProject,
  readTogether,
  runCounts,
  projectQuota,
  projectQuotaRead,
  runCountsRead,
  quotaQueuePosition,
  getRun,
  isUniqueViolation,
  isRunQuotaFull,
  listRuns,
  listToolCalls,
  laterRunExists,
  lockAuditLog,
  waitForLess,
  lockRun,
  resumeFailedRun,
  terminalRunStatuses,
  type Compaction,
  type Conversation,
  type Executor,
  type MessagePart,
  type ModelParams,
  type NewRun,
  type Prefetched,
  type Project,
  getConversation,
  getUser,
  type AccessSubject,
  type Run,
  type RunProfile,
  type Store,
  type RunBudget,
  type ToolCallStatus,
  type TranscriptRow,
  conversationProjectId,
} from '../store/index.js'
import { resolveClientTools } from './client-tools.js'
import { ModelSlots } from './model-slots.js'
import { abortDriver } from './driver.js'
import { DriverPool } from './driver-pool.js'
import { LeaseClock } from './leases.js'
import { budgetStop } from './budget.js'
import { PeriodBudgets } from './period-budgets.js'
import { RunQuotas, type RunQuota } from './run-quotas.js'
import { freshStanding, type ReadStanding, type StandingReads } from './run-standing.js'
import { QuotaPromoter } from './quota-promoter.js'
import { outputSpec } from './structured-output.js'
import { RetentionSweeper, type RetentionReport, type RetentionSettings } from './retention-sweeper.js'
import { RunDecisions } from './run-decisions.js'
import { RunWriter, cancelEnd } from './run-writer.js'
import { RunSweeper } from './run-sweeper.js'
import { transcriptBudget, WindowCache } from './transcript-window.js'
import { commandTools } from './tool-table.js'
import { RunRequestError } from './run-errors.js'
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
  /** What one model answer may hold: characters of text and tool arguments, and tool calls. */
  answerLimits?: Partial<AnswerLimits>
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
  /** Every run's budget unless its request sets its own limits (`budgets.run`). */
  runBudget?: RunBudget
  /** Caps on active runs per project and on runs started per minute (docs/guides/operating.md#run-quotas). */
  runQuota?: RunQuota
  /** What is deleted after how long (docs/guides/operating.md#retention). */
  retention?: RetentionSettings
  /** Context compaction of long conversations (docs/guides/agent-runs.md#context-compaction). */
  compaction?: Partial<CompactionSettings>
  /** Signs the checkpoints audit retention leaves (the server's secretKey). */
  auditKey?: string
  /** Removes the work directory of a conversation retention purged. */
  discardWorkDir?: (conversationId: string) => Promise<void>
  /** Removes this instance's cached copies of the files of purged conversations (shared work directories). */
  evictWorkCaches?: () => Promise<number>
  /** Reads a file of a conversation: the images of its messages, sent to vision models. */
  readFile?: (conversationId: string, path: string) => Promise<Buffer>
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
  /** `recall: false` keeps memories out of the prompt (isolated); absent: the project's switch. */
  memory?: { recall?: boolean }
  /** Override the project's (and the model's configured) parameters for this run. */
  modelParams?: ModelParams
  /** The most this run may spend, over the server's default run budget (docs/guides/operating.md#budgets). */
  budget?: RunBudget
  /** The message's parts when it has images (`input` is then its text). */
  parts?: MessagePart[]
  /** The schema the final answer must follow (docs/guides/agent-runs.md#structured-output). */
  output?: { schema: { [key: string]: unknown }; name?: string; strict?: boolean; maxRepairs?: number }
}

/**
 * Runs the agent's ReAct loop (docs/architecture.md#the-run-loop): stream the model, dispatch its tool
 * calls through the command bus, pause for humans, continue, finish. Every state change is written (with
 * its event) before it is announced; every tool call ends with exactly one terminal result. The process
 * holding a run's lease is its only writer: each of its writes is fenced by the lease, so a driver whose
 * lease passed to another instance (or whose run was cancelled elsewhere) changes nothing and stops.
 */
/**
 * How long after an access announcement a new run's owner is checked again (covers the request's own
 * check). Short: the gap is that check to the run's commit, plus a notification's way from another
 * instance; and every announcement about a project opens it (its creation and changes too), a run
 * created inside it costing two more reads.
 */
const accessRecheckWindowMs = 2_000

/** Failures a run can be resumed from: upstream trouble, an interruption, a model configured again. */
const resumableCodes = [
  'upstream_error',
  'upstream_auth_missing',
  'timeout',
  'interrupted',
  'tools_unsupported',
  'unknown_model',
  'budget_exceeded',
  'output_too_large',
]

export class RunManager {
  readonly #options: RunManagerOptions
  readonly #leases: LeaseClock
  readonly #ledger: CallLedger
  readonly #writer: RunWriter
  readonly #pool: DriverPool
  readonly #decisions: RunDecisions
  readonly #sweeper: RunSweeper
  readonly #periodBudgets: PeriodBudgets
  readonly #quotas: RunQuotas
  readonly #promoter: QuotaPromoter | undefined
  readonly #retention: RetentionSweeper
  readonly #compactor: Compactor
  readonly #windows = new WindowCache()
  /** When each subject's last access announcement came (performance.now()), for a while: see createRun. */
  readonly #accessChanges = new Map<AccessSubject, number>()
  #accessChangesPruned = 0
  #unsubscribe: Array<() => void> = []

  constructor(options: RunManagerOptions) {
    this.#options = options
    const { store, bus, log } = options
    this.#leases = new LeaseClock(options.leaseMs ?? 30_000)
    this.#ledger = new CallLedger({
      catalog: bus.catalog,
      toolOutputLimit: options.toolOutputLimit ?? 4096,
      observer: options.observer,
    })
    this.#writer = new RunWriter({ store, bus, log, ledger: this.#ledger, leases: this.#leases })
    this.#periodBudgets = new PeriodBudgets()
    this.#compactor = new Compactor({
      store,
      models: options.models,
      log,
      ...(options.compaction && { settings: options.compaction }),
    })
    this.#quotas = new RunQuotas(options.maxActiveRunsPerUser ?? 10, options.runQuota)
    this.#pool = new DriverPool({
      store,
      bus,
      models: options.models,
      log,
      retriever: options.retriever,
      systemPrompt: options.systemPrompt,
      observer: options.observer,
      ledger: this.#ledger,
      modelSlots: new ModelSlots(options.maxConcurrentModelCalls ?? 16, options.maxConcurrentModelCallsPerUser),
      periodBudgets: this.#periodBudgets,
      leases: this.#leases,
      writer: this.#writer,
      readFile: options.readFile,
      compactor: this.#compactor,
      windows: this.#windows,
      answerLimits: { ...defaultAnswerLimits, ...options.answerLimits },
    })
    this.#decisions = new RunDecisions({ store, pool: this.#pool, writer: this.#writer })
    // Queue mode: runs over a quota wait, and are started as room frees.
    this.#promoter =
      this.#quotas.mode === 'queue'
        ? new QuotaPromoter({ store, log, quotas: this.#quotas, pool: this.#pool, leases: this.#leases })
        : undefined
    this.#retention = new RetentionSweeper(store, log, options.retention ?? {}, {
      ...(options.auditKey && { auditKey: options.auditKey }),
      ...(options.discardWorkDir && { discardWorkDir: options.discardWorkDir }),
      ...(options.evictWorkCaches && { evictWorkCaches: options.evictWorkCaches }),
    })
    this.#sweeper = new RunSweeper({
      store,
      bus,
      log,
      leases: this.#leases,
      pool: this.#pool,
      writer: this.#writer,
      maxResumes: options.maxResumes,
      actionTtlMs: options.actionTtlMs,
    })
  }

  /** Binds to the bus and run signals, recovers what a previous process left, starts the sweeper. */
  async start(): Promise<void> {
    const { bus, store, log } = this.#options
    bus.bindRuns(this.#ledger)
    this.#unsubscribe.push(
      this.#decisions.follow(bus, log),
      store.runs.subscribe((runId) => this.#onRunEndedElsewhere(runId)),
      // A run ended here or elsewhere: its quota slot may let a waiting run start.
      store.runs.subscribe(() => void this.#promoter?.poke()),
      // A run whose owner can no longer see its conversation stops calling the model at once.
      store.access.subscribe((subject) => this.#recheckAccess(subject)),
    )
    const recheck = setInterval(() => this.#recheckAccess(), 60_000)
    recheck.unref()
    this.#unsubscribe.push(() => clearInterval(recheck))
    // Dispatches first: a resumed run's interrupted tool call then finds its dispatch ended too.
    await bus.sweepOrphanedDispatches({ all: this.#options.exclusiveDatabase === true })
    const swept = await this.sweep({ orphansOnly: this.#options.exclusiveDatabase === true })
    if (swept.resumed + swept.failed > 0)
      log.info(`recovered ${swept.resumed + swept.failed} runs`, {
        resumed: swept.resumed,
        failed: swept.failed,
        outcome: 'resumed ones continue from their last checkpoint',
      })
    if (swept.failed > 0)
      log.warn(`ended ${swept.failed} runs that could not resume`, {
        failed: swept.failed,
        outcome: 'failed (interrupted); resume with POST /api/runs/:id/resume',
      })
    this.#sweeper.start(Math.max(1000, this.#leases.ms / 2))
    this.#promoter?.start()
    void this.#promoter?.poke()
    this.#retention.start()
  }

  /**
   * Graceful stop: takes no new runs, stops model calls at once, lets tool calls in flight finish
   * (up to the grace period), checkpoints every driven run and releases its lease, so the restarted
   * server (or another instance) resumes it.
   */
  async stop(): Promise<void> {
    this.#pool.refuseNew()
    this.#sweeper.stop()
    this.#promoter?.stop()
    this.#retention.stop()
    for (const unsubscribe of this.#unsubscribe) unsubscribe()
    this.#unsubscribe = []
    await this.#pool.stop(this.#options.shutdownGraceMs ?? 10_000)
    // The bus stays bound: a decision answered before the server stops listening must still reach
    // its run's ledger (in the bus's transaction); the next server's sweeper continues that run.
  }

  /**
   * How many runs this instance drives now (in a model turn or a tool call, or waiting for a model slot),
   * and how many drives ended here since it started.
   */
  get driveLoad(): { driven: number; ended: number } {
    return { driven: this.#pool.size, ended: this.#pool.endedCount }
  }

  get models(): ModelRegistry {
    return this.#options.models
  }

  /**
   * The reads that decide a new run's admission, for the statement that reads its conversation
   * (`getConversationWithProject`) to carry; hand them back to `createRun`.
   */
  standingReads(userId: string): StandingReads {
    const scope = { projectId: conversationProjectId, userId }
    const periods = this.#periodBudgets.check(scope)
    return {
      userId,
      reads: { counts: runCountsRead(scope, this.#quotas.mode, this.#quotas.perMinute), periods: periods.read },
      periods,
      preparedAt: performance.now(),
    }
  }

  /** Creates a run for a user message; `{active}` when another run is active and `ifActive` is unset. */
  async createRun(
    conversation: Conversation,
    userId: string,
    input: CreateRunInput,
    hooks: {
      onCreated?: (tx: Executor, run: Run) => Promise<void>
      /**
       * Before `ifActive: "interrupt"` ends the active run: throws to leave it be (a retry whose key
       * already made a run must not cancel that run).
       */
      beforeSupersede?: () => Promise<void>
      project?: Project
      /** The standing read ahead with the conversation (`standingReads`). */
      standing?: ReadStanding
    } = {},
  ): Promise<{ run: Run } | { active: Run }> {
    if (this.#pool.stopping)
      throw new RunRequestError('shutting_down', 'the server is shutting down; try again in a moment')
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
    if (
      input.parts?.some((part) => part.type === 'image') &&
      !models.chain(model).some((candidate) => candidate.capabilities?.includes('vision'))
    )
      throw new RunRequestError(
        'model_lacks_capability',
        `model ${model} takes no images (it does not declare capabilities: ["vision"]); pick one that does`,
      )
    const profile: RunProfile = {
      systemPrompt: project?.systemPrompt ?? null,
      modelParams: { ...project?.modelParams, ...input.modelParams },
      tools: project?.tools ?? null,
      ...(project && { injectFrom: { projectOwnerId: project.ownerId, members: project.injectMemberKnowledge } }),
      ...(input.output && { output: outputSpec(input.output) }),
      ...((input.memory?.recall ?? project?.memoryRecall ?? true) === false && { memoryRecall: false as const }),
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
    // A user or project may not crowd the model out for everyone: caps on queued and running runs and
    // on runs started per minute, counted in the database so they hold across instances.
    // A spent budget for the day or month refuses it too; both in one read.
    const scope = { projectId: conversation.projectId, userId }
    const ahead = freshStanding(hooks.standing, userId)
    const periods = ahead?.check ?? this.#periodBudgets.check(scope)
    const standing =
      ahead ??
      (await readTogether(this.#options.store, {
        counts: runCountsRead(scope, this.#quotas.mode, this.#quotas.perMinute),
        periods: periods.read,
      }))
    // Over a quota: 429, or (queue mode) the run waits as `queued` until there is room.
    const ownQuota = project?.quota ?? null
    let admission = this.#quotas.admit(runCounts(standing.counts), ownQuota)
    this.#periodBudgets.refuseWhenSpent(periods, standing.periods)
    const maxIterations = input.maxIterations ?? 10
    // The project's and the server's default cost limit cannot hold a model without a price; one the
    // request asks for is refused.
    const { maxCost: defaultMaxCost, ...defaults } = { ...this.#options.runBudget, ...project?.budget?.run }
    const budget: RunBudget = {
      ...defaults,
      ...(defaultMaxCost !== undefined && models.priceOf(model) && { maxCost: defaultMaxCost }),
      ...input.budget,
    }
    if (input.budget?.maxCost !== undefined && !models.priceOf(model))
      throw new RunRequestError(
        'validation_failed',
        `budget.maxCost needs a price: model ${model} has none (models[].pricing)`,
      )
    const lease = this.#leases.newLease()
    const newRun: NewRun = {
      conversationId: conversation.id,
      projectId: conversation.projectId,
      ownerId: userId,
      model,
      maxIterations,
      approvalPolicy: input.approvalPolicy ?? 'ask',
      clientTools: clientTools as unknown as JsonValue,
      input: input.input,
      ...(input.parts && { parts: input.parts }),
      ...(input.knowledge?.autoInject === false && { knowledge: { autoInject: false } }),
      profile,
      ...(Object.keys(budget).length > 0 && { budget }),
      view: runView,
    }
    // One statement starts the run, queues it, or reports the active run; with a hook, inside the
    // transaction the hook writes in (e.g. the Idempotency-Key's record: both or neither). A run that
    // starts at once gets its driver's first reads (the transcript window, whether there is knowledge).
    // The window this instance kept from the conversation's last run: the start reads only what came after it.
    const maxChars = transcriptBudget(models.get(model)!)
    const kept = this.#windows.get(conversation.id, maxChars)
    const write = (allowQueue: boolean, recount: boolean) =>
      this.#options.store.createRun(newRun, {
        lease,
        allowQueue,
        ...(admission === 'queue' && { queueForQuota: true }),
        ...(recount && { quota: this.#quotas.limits(ownQuota, admission) }),
        prefetch: {
          maxChars,
          maxRows: windowRows,
          ...(kept && { kept: { firstId: kept[0]!.id, lastId: kept.at(-1)!.id } }),
        },
        ...(hooks.onCreated && { within: hooks.onCreated }),
      })
    // The statement counts the quotas again once runs asked for at the same moment have committed: full
    // then, the counts read afresh decide as above (429, or queued), or a run that ended meanwhile made room.
    // A run that takes the place of the one it superseded (`interrupt`) adds none: not counted again,
    // lest the slot the cancel freed go to another request and the message be refused after all.
    const create = async (allowQueue: boolean, recount = true): Promise<CreatedRun> => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await write(allowQueue, recount)
        } catch (error) {
          if (!isRunQuotaFull(error)) throw error
          if (attempt >= 5)
            throw new RunRequestError('too_many_runs', 'runs are starting here at this moment; try again', {
              retryAfter: 1,
            })
          const counts = await readTogether(this.#options.store, {
            counts: runCountsRead(scope, this.#quotas.mode, this.#quotas.perMinute),
          })
          admission = this.#quotas.admit(runCounts(counts.counts), ownQuota)
        }
      }
    }
    let created: CreatedRun = await create(input.ifActive === 'enqueue')
    // Interrupt: the new message supersedes everything still pending in the conversation — the queued
    // runs first (so ending the active one promotes none of them), then the active one. Interrupts
    // sent together each win a turn in some order (one per pass), so each goes on until it starts.
    const giveUpAt = Date.now() + 15_000
    for (let attempt = 0; 'active' in created && input.ifActive === 'interrupt' && attempt < 200; attempt++) {
      if (attempt >= 5 && Date.now() > giveUpAt) break
      // Past the first few passes a run is not ending quickly: back off (up to 200 ms, jittered).
      if (attempt >= 5) await sleep(Math.min(200, 5 * 2 ** (attempt - 5)) * (0.5 + Math.random() / 2))
      await this.#supersede(conversation.id, hooks.beforeSupersede)
      created = await create(false, false)
    }
    // Access changed while this run was being created (after the request's check, before a driver held
    // it, where the change's own re-check could not see it): its owner's access is checked once more.
    if ('run' in created && this.#accessChangedFor(created.run)) {
      const run = created.run
      void this.#endWithoutAccess(run).catch((error: unknown) =>
        this.#options.log.warn('could not re-check a new run’s access', { runId: run.id, err: error }),
      )
    }
    // The owner of the project may write there (anyone else: the driver asks).
    if ('run' in created && created.run.status === 'running') {
      this.#pool.spawn(created.run.id, lease.owner, {
        run: created.run,
        prefetched: kept ? this.#afterKept(conversation.id, kept, created.prefetched) : created.prefetched,
        ...(project?.ownerId === userId && { writable: true }),
      })
    }
    // Waiting for a quota: its place in line, and a look for room (a run may have ended meanwhile).
    else if ('run' in created && created.run.queuedFor === 'quota') {
      created.run.queuePosition = await quotaQueuePosition(this.#options.store, created.run)
      void this.#promoter?.poke()
    }
    // A queued run: the active one may have ended between our check and our commit; look again.
    else if ('run' in created) await this.#pool.startNext(conversation.id)
    return 'run' in created ? { run: created.run } : { active: created.active }
  }

  /**
   * What the run's start read after a kept window, with the window: as a whole read would have read it.
   * Nothing is handed over (the driver reads for itself) when the window's range now holds a message it
   * lacks (one written with an older id, e.g. by an instance whose clock is behind), or when the read
   * was cut short (as many rows as a read returns, beside the run's own message: newer ones may be missing).
   */
  #afterKept(
    conversationId: string,
    kept: readonly TranscriptRow[],
    prefetched: Prefetched | undefined,
  ): Prefetched | undefined {
    if (!prefetched) return undefined
    if (prefetched.keptCount !== kept.length || prefetched.transcript.length > windowRows) {
      this.#windows.drop(conversationId)
      return undefined
    }
    return { ...prefetched, transcript: [...kept, ...prefetched.transcript] }
  }

  /** Ends every queued and active run of a conversation as `superseded`, queued ones first. */
  async #supersede(conversationId: string, beforeCancel?: () => Promise<void>): Promise<void> {
    const pending = await listRuns(this.#options.store, { conversationId, statuses: activeRunStatuses }, { limit: 200 })
    // After the listing: a run committed before it (with its key's answer, in one transaction) is seen
    // by the check; one committed after it is not in the list, so it is never ended here.
    await beforeCancel?.()
    const queuedFirst = [...pending.items].sort((a, b) => Number(b.status === 'queued') - Number(a.status === 'queued'))
    for (const run of queuedFirst) await this.cancel(run.id, 'superseded')
  }

  /**
   * Ends, `cancelled` with `reason`, every queued, running and waiting run of a conversation or project
   * that was just deleted — queued ones first, so none of them starts when the run ahead of it ends. A
   * run waiting for a decision would otherwise wait for one nobody can reach any more.
   */
  async endRunsOf(scope: { conversationId: string } | { projectId: string }, reason: string): Promise<void> {
    const filter =
      'conversationId' in scope
        ? { conversationId: scope.conversationId, statuses: activeRunStatuses }
        : { projectIds: [scope.projectId], statuses: activeRunStatuses }
    for (let pass = 0; pass < 100; pass++) {
      const { items } = await listRuns(this.#options.store, filter, { limit: 200 })
      if (items.length === 0) return
      const queuedFirst = [...items].sort((a, b) => Number(b.status === 'queued') - Number(a.status === 'queued'))
      for (const run of queuedFirst) await this.cancel(run.id, reason)
    }
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
    const driver = this.#pool.driver(runId)
    if (driver) {
      abortDriver(driver, reason)
      await driver.done
      const after = await getRun(store, runId)
      if (after && !terminalRunStatuses.includes(after.status))
        await this.#writer.end(runId, cancelEnd(reason), { announce: true })
    } else {
      await this.#writer.end(runId, cancelEnd(reason), { announce: true })
    }
    return getRun(store, runId)
  }

  /**
   * Ends, `cancelled` with reason `access_revoked`, every run driven here whose owner may no longer see
   * its conversation (removed from a shared project, the project or conversation deleted, the user
   * disabled), and the undriven ones the announcement concerns. Called on every access announcement
   * and once a minute for adapters that change silently.
   */
  #recheckAccess(subject?: AccessSubject): void {
    const { store, log } = this.#options
    // A token's announcement concerns no new run (a revoked token's requests are refused at once).
    if (subject && !subject.startsWith('token:')) this.#noteAccessChange(subject)
    for (const runId of this.#pool.drivenRunIds()) {
      void (async () => {
        const run = await getRun(store, runId)
        if (run) await this.#endWithoutAccess(run)
      })().catch((error: unknown) => log.warn('could not re-check a run’s access', { runId, err: error }))
    }
    // Runs no driver holds (waiting for an answer, or queued) of whom the announcement concerns: a
    // removed member's call must not stay open for the project's owner, or anyone, to answer.
    if (subject && !subject.startsWith('token:'))
      this.#recheckUndriven(subject).catch((error: unknown) =>
        log.warn('could not re-check waiting runs’ access', { subject, err: error }),
      )
  }

  #noteAccessChange(subject: AccessSubject): void {
    const now = performance.now()
    // Entries older than the window are let go once a second at most, not at every note: a purge
    // announces many projects at once.
    if (now - this.#accessChangesPruned >= 1000) {
      this.#accessChangesPruned = now
      for (const [known, at] of this.#accessChanges)
        if (now - at >= accessRecheckWindowMs) this.#accessChanges.delete(known)
    }
    this.#accessChanges.set(subject, now)
  }

  /** Whether an announcement that may concern the run (its owner, its project, everyone) came lately. */
  #accessChangedFor(run: Run): boolean {
    const now = performance.now()
    return (['all', `user:${run.ownerId}`, `project:${run.projectId}`] as const).some(
      (subject) => now - (this.#accessChanges.get(subject) ?? Number.NEGATIVE_INFINITY) < accessRecheckWindowMs,
    )
  }

  async #recheckUndriven(subject: AccessSubject): Promise<void> {
    const filter =
      subject === 'all'
        ? {}
        : subject.startsWith('project:')
          ? { projectIds: [subject.slice('project:'.length)] }
          : { ownerId: subject.slice('user:'.length) }
    const { items } = await listRuns(
      this.#options.store,
      { ...filter, statuses: ['requires_action', 'queued'] },
      { limit: 500 },
    )
    for (const run of items) {
      if (this.#pool.driver(run.id)) continue
      // A deleted conversation or project: the deletion ends its runs itself, with its own reason.
      if (!(await getConversation(this.#options.store, run.conversationId))) continue
      await this.#endWithoutAccess(run)
    }
  }

  /** Cancels the run (`access_revoked`) when its owner was disabled or may no longer see its conversation. */
  async #endWithoutAccess(run: Run): Promise<void> {
    if (terminalRunStatuses.includes(run.status)) return
    const owner = await getUser(this.#options.store, run.ownerId)
    if (owner && !owner.disabled && (await this.#options.bus.maySee(run.ownerId, run.conversationId))) return
    this.#options.log.info('run ended: its owner was disabled or lost access to the conversation', { runId: run.id })
    await this.cancel(run.id, 'access_revoked')
  }

  /** Another instance ended a run (null: any run, after a reconnect): drivers here that lost it stop. */
  #onRunEndedElsewhere(runId: string | null): void {
    const check = async (id: string): Promise<void> => {
      const driver = this.#pool.driver(id)
      if (!driver) return
      const run = await getRun(this.#options.store, id)
      if (!run || run.status !== 'running' || run.leaseOwner !== driver.fence.owner) abortDriver(driver, 'lease_lost')
    }
    const ids = runId ? [runId] : this.#pool.drivenRunIds()
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
      // Still waiting for the rest: `requiredAction` (and a `run.status`) says what is left.
      await waitForLess(tx, runId)
    })
    await this.#pool.resumeIfAnswered(runId)
    return (await getRun(store, runId)) ?? run
  }

  /** See RunSweeper.sweep. */
  sweep(options: { orphansOnly?: boolean } = {}): Promise<{ resumed: number; failed: number }> {
    return this.#sweeper.sweep(options)
  }

  /**
   * Compacts a conversation now (`POST /api/conversations/:id/compact`): all but its last turn, with
   * `model` or the project's default model writing the summary (unless `compaction.model` is set).
   * 409 `nothing_to_compact` when it has no earlier turn to summarise; 502 `compaction_failed` when the
   * summary call fails (nothing changes then); 429 `budget_exceeded` while a period budget is spent.
   */
  async compact(conversation: Conversation, project: Project, model?: string): Promise<Compaction> {
    const models = this.#options.models
    const projectModel = project.defaultModel && models.get(project.defaultModel) ? project.defaultModel : undefined
    const modelId = model ?? projectModel ?? models.defaultId
    if (!models.get(modelId))
      throw new RunRequestError('unknown_model', `no model ${JSON.stringify(modelId)}; GET /api/models lists them`)
    // The summary call is spending like a run's: a spent day's or month's budget refuses it (429).
    const periods = this.#periodBudgets.check({ projectId: conversation.projectId, userId: conversation.ownerId })
    const standing = await readTogether(this.#options.store, { periods: periods.read })
    this.#periodBudgets.refuseWhenSpent(periods, standing.periods)
    let compaction: Compaction | undefined
    try {
      compaction = await this.#compactor.force(conversation, modelId)
    } catch (error) {
      if (error instanceof CompactionError) throw new RunRequestError('compaction_failed', error.message)
      throw error
    }
    if (!compaction)
      throw new RunRequestError(
        'nothing_to_compact',
        'the conversation has no earlier turn to summarise (its last turn is always kept as it is)',
      )
    return compaction
  }

  /** One retention sweep now (it also runs every `retention.sweepMs`): what it deleted. */
  sweepRetention(): Promise<RetentionReport> {
    return this.#retention.sweep()
  }

  /**
   * Drops the work files of a conversation or project just deleted, once its runs have ended, so their
   * room is the user's again at once. Never fails the deletion: what is left goes at the next sweep.
   */
  async dropDeletedWork(scope: { conversationId: string } | { projectId: string }): Promise<void> {
    await this.#retention.dropDeletedWork(scope).catch((error: unknown) => {
      this.#options.log.warn('the files of a deleted conversation stay until the next retention sweep', {
        err: error,
      })
    })
  }

  /**
   * Resumes a run that failed upstream (or was interrupted) from its last checkpoint: the transcript
   * already holds every finished round, so no completed tool call runs again.
   */
  async resume(runId: string, options: { budget?: RunBudget } = {}): Promise<Run> {
    return this.#resume(runId, options, 1)
  }

  async #resume(runId: string, options: { budget?: RunBudget }, attempt: number): Promise<Run> {
    const { store } = this.#options
    if (this.#pool.stopping)
      throw new RunRequestError('shutting_down', 'the server is shutting down; try again in a moment')
    const lease = this.#leases.newLease()
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
        // Its checkpoint is the transcript as it was; a later run's messages have come after it since.
        if (await laterRunExists(tx, run))
          throw new RunRequestError(
            'run_not_resumable',
            'a later message was sent in this conversation since this run failed; only the latest run can be resumed',
          )
        if (!this.#options.models.get(run.model))
          throw new RunRequestError(
            'unknown_model',
            `model ${run.model} is not configured; configure it again, then resume`,
          )
        // A raised budget goes with the resume; one still spent would stop the run again at once.
        const budget = options.budget ? { ...run.budget, ...options.budget } : run.budget
        if (options.budget?.maxCost !== undefined && !this.#options.models.priceOf(run.model))
          throw new RunRequestError(
            'validation_failed',
            `budget.maxCost needs a price: model ${run.model} has none (models[].pricing)`,
          )
        const spent = budgetStop({ ...run, budget }, 0, this.#options.models.priceOf(run.model))
        if (spent)
          throw new RunRequestError(
            'run_not_resumable',
            `the run's budget ${spent.budget.limit} (${spent.budget.value}) is still spent (${spent.budget.used}); resume with a higher one: {"budget": {"${spent.budget.limit}": …}}`,
          )
        // A resumed run takes a slot like a new one: the caps on runs queued or running hold, and a
        // spent budget for the day or month refuses it (all in one read). The write counts again, so
        // resumes and new runs asked for at the same moment pass no further either.
        const scope = { projectId: run.projectId, userId: run.ownerId }
        const periods = this.#periodBudgets.check(scope)
        const standing = await readTogether(tx, {
          periods: periods.read,
          counts: runCountsRead(scope, this.#quotas.mode, this.#quotas.perMinute),
          quota: projectQuotaRead(run.projectId),
        })
        const own = projectQuota(standing.quota)
        this.#quotas.refuseResumeWhenFull(runCounts(standing.counts), own)
        this.#periodBudgets.refuseWhenSpent(periods, standing.periods)
        return resumeFailedRun(tx, runId, lease, options.budget ? budget : undefined, this.#quotas.resumeLimits(own))
      })
    } catch (error) {
      // Counted again, full: 429 as above, from fresh counts (a run that ended meanwhile may make room).
      if (isRunQuotaFull(error)) {
        const run = await getRun(store, runId)
        if (run) {
          const scope = { projectId: run.projectId, userId: run.ownerId }
          const fresh = await readTogether(store, {
            counts: runCountsRead(scope, this.#quotas.mode, this.#quotas.perMinute),
            quota: projectQuotaRead(run.projectId),
          })
          this.#quotas.refuseResumeWhenFull(runCounts(fresh.counts), projectQuota(fresh.quota))
        }
        if (attempt >= 3)
          throw new RunRequestError('too_many_runs', 'runs are starting in this project at this moment; try again', {
            retryAfter: 1,
          })
        return this.#resume(runId, options, attempt + 1)
      }
      // Only the one-active-run index means another run is active; anything else is a refusal or a real failure.
      if (!isUniqueViolation(error)) throw error
      throw new RunRequestError('run_active', 'another run is active in this conversation')
    }
    this.#pool.spawn(runId, lease.owner)
    return resumed
  }
}

/** The most rows a transcript read returns (see `readTranscriptTail`). */
const windowRows = 2000
