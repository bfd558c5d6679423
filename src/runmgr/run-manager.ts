import { randomUUID } from 'node:crypto'
import { hashParams, type CommandBus, type DecisionView, type DispatchOutcome, type RegisteredCommand } from '../cmdbus/index.js'
import type { JsonValue, PluginLogger } from '../extension/index.js'
import { ModelError, projectToolSchema, streamWithRetries, type LanguageModel, type ModelMessage, type ModelRegistry, type ModelTool, type ModelToolCall } from '../llm/index.js'
import type { Retriever } from '../rag/index.js'
import {
  activeRunStatuses,
  announceRunEnded,
  appendEvents,
  closeStreamingMessages,
  completeAssistantMessage,
  createRun,
  fenceRun,
  findAnsweredWaitingRuns,
  findRunsWaitingSince,
  findRunsWithExpiredLease,
  findStartableQueues,
  getProject,
  getRun,
  hasKnowledge,
  insertAssistantMessage,
  insertToolCall,
  isUniqueViolation,
  listRuns,
  listToolCalls,
  lockAuditLog,
  lockRun,
  newId,
  nextQueuedRun,
  pendingDecisionIds,
  readTranscriptTail,
  releaseLease,
  renewLease,
  runEvent,
  takeOverRun,
  terminalRunStatuses,
  updateRun,
  updateToolCall,
  type Conversation,
  type Executor,
  type ModelParams,
  type Run,
  type RunFence,
  type RunProfile,
  type RunPatch,
  type Store,
  type StoredToolCall,
  type ToolCallRecord,
  type ToolCallStatus,
  type TranscriptMessage,
} from '../store/index.js'
import { proposeCommandTool, resolveClientTools } from './client-tools.js'
import { DeltaCoalescer } from './delta-coalescer.js'
import { ModelSlots } from './model-slots.js'
import { knowledgeBlock, selectForInjection, type KnowledgeContext } from './knowledge-context.js'
import { buildModelMessages, trimToBudget } from './history.js'
import { RunRequestError } from './run-errors.js'
import { RunLedger, clientCallAudit, openStatuses, type RunEnd } from './run-ledger.js'
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

type ToolEntry = { kind: 'command'; command: RegisteredCommand; tool: ModelTool } | { kind: 'client'; tool: ModelTool }

const baseSystemPrompt =
  'You are an agent working inside Plinth. Use the tools offered when they help; a person may have to approve some calls. Answer concisely.'
const noToolsPrompt =
  'You cannot use tools or look anything up in this conversation. When a question needs data you do not have, say so plainly instead of inventing it.'
const capPrompt = 'The maximum number of tool rounds for this run has been reached. Answer now with what you have, without calling tools, and say that the limit was reached.'

/** The run's lease has passed to someone else (or the run ended elsewhere): its driver stops without writing. */
class LeaseLost extends Error {
  constructor() {
    super('the run lease has passed to another driver')
    this.name = 'LeaseLost'
  }
}

/** Why a driver stops: `shutdown` and `lease_lost` leave the run to be resumed; the rest end it. */
type StopReason = 'cancelled' | 'superseded' | 'shutdown' | 'lease_lost' | (string & {})

/** This process driving one run. */
interface Driver {
  fence: RunFence
  /** Taken over from a stopped driver: calls of its last round may still be open. */
  resumed: boolean
  /** Whether the owner may write in the project, when already known. */
  writable: boolean | undefined
  /** Aborts the model stream and the loop. */
  loop: AbortController
  /** Aborts tool calls in flight (at once on cancel; after the grace period on shutdown). */
  calls: AbortController
  done: Promise<void>
}

/**
 * Runs the agent's ReAct loop (SPEC §6): stream the model, dispatch its tool calls through the
 * command bus, pause for humans, continue, finish. Every state change is written (with its event)
 * before it is announced; every tool call ends with exactly one terminal result. The process holding
 * a run's lease is its only writer: each of its writes is fenced by the lease, so a driver whose
 * lease passed to another instance (or whose run was cancelled elsewhere) changes nothing and stops.
 */
export class RunManager {
  readonly #options: RunManagerOptions
  readonly #instanceId = randomUUID()
  #leaseSeq = 0
  readonly #drivers = new Map<string, Driver>()
  /** Cancel signals of waiting runs, for handlers that run after a human approved. */
  readonly #waiting = new Map<string, AbortController>()
  readonly #ledger: RunLedger
  #sweeper: NodeJS.Timeout | null = null
  #unsubscribe: Array<() => void> = []
  #stopping = false
  readonly #modelSlots: ModelSlots

  constructor(options: RunManagerOptions) {
    this.#options = options
    this.#modelSlots = new ModelSlots(options.maxConcurrentModelCalls ?? 16)
    this.#ledger = new RunLedger(options.bus, options.toolOutputLimit ?? 4096, options.observer)
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
    })
    this.#unsubscribe.push(
      bus.onDecisionResolved((decision) => {
        if (!decision.runId) return
        this.#afterDecision(decision.runId).catch((error: unknown) => log.error('could not continue a run after a decision', { runId: decision.runId, error: String(error) }))
      }),
      store.runs.subscribe((runId) => this.#onRunEndedElsewhere(runId)),
    )
    // Dispatches first: a resumed run's interrupted tool call then finds its dispatch ended too.
    await bus.sweepOrphanedDispatches({ all: this.#options.exclusiveDatabase === true })
    const swept = await this.sweep({ orphansOnly: this.#options.exclusiveDatabase === true })
    if (swept.resumed > 0) log.info(`resumed ${swept.resumed} runs`, { resumed: swept.resumed, outcome: 'continuing from their last checkpoint' })
    if (swept.failed > 0) log.warn(`ended ${swept.failed} runs that could not resume`, { failed: swept.failed, outcome: 'failed (interrupted); resume with POST /api/runs/:id/resume' })
    this.#sweeper = setInterval(() => void this.#sweepOnce(), Math.max(1000, this.#leaseMs() / 2))
    this.#sweeper.unref()
  }

  /** One pass of the periodic sweeper: orphaned dispatches, then runs. Failures are logged, and it tries again. */
  async #sweepOnce(): Promise<void> {
    try {
      await this.#options.bus.sweepOrphanedDispatches({ all: false })
      const swept = await this.sweep()
      if (swept.resumed > 0) this.#options.log.info(`resumed ${swept.resumed} runs`, { resumed: swept.resumed })
      if (swept.failed > 0) this.#options.log.warn(`ended ${swept.failed} runs that could not resume`, { failed: swept.failed })
    } catch (error) {
      this.#options.log.warn('the run sweeper failed; it tries again', { error: String(error) })
    }
  }

  /**
   * Graceful stop: takes no new runs, stops model calls at once, lets tool calls in flight finish
   * (up to the grace period), checkpoints every driven run and releases its lease, so the restarted
   * server (or another instance) resumes it.
   */
  async stop(): Promise<void> {
    this.#stopping = true
    if (this.#sweeper) clearInterval(this.#sweeper)
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
    hooks: { onCreated?: (tx: Executor, run: Run) => Promise<void> } = {},
  ): Promise<{ run: Run } | { active: Run }> {
    if (this.#stopping) throw new RunRequestError('shutting_down', 'the server is shutting down; try again in a moment')
    const { models } = this.#options
    const project = await getProject(this.#options.store.db, conversation.projectId)
    // The project's default model, unless the operator has since removed it from the configuration.
    const projectModel = project?.defaultModel && models.get(project.defaultModel) ? project.defaultModel : undefined
    const model = input.model ?? projectModel ?? models.defaultId
    if (!models.get(model)) throw new RunRequestError('unknown_model', `no model ${JSON.stringify(model)}; GET /api/models lists them`)
    const profile: RunProfile = {
      systemPrompt: project?.systemPrompt ?? null,
      modelParams: { ...project?.modelParams, ...input.modelParams },
      tools: project?.tools ?? null,
    }
    const clientTools = resolveClientTools(input.clientTools)
    // A client tool must not take the name of a command tool: the model would call one thinking it the other.
    const commandTools = new Map([...this.#commandTools(profile.tools)].map((entry) => [entry.toolName, entry.commandId]))
    for (const tool of clientTools) {
      const commandId = commandTools.get(tool.name)
      if (commandId) throw new RunRequestError('client_tool_conflict', `the client tool ${JSON.stringify(tool.name)} has the name of the tool of command ${commandId}; rename the client tool`)
    }
    const maxIterations = input.maxIterations ?? 10
    const lease = this.#newLease()
    const create = (allowQueue: boolean) =>
      this.#options.store.transaction(async (tx) => {
        const result = await createRun(
          tx,
          {
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
          },
          { allowQueue, lease },
        )
        // In the same transaction, e.g. the Idempotency-Key's record: both or neither.
        if ('run' in result) await hooks.onCreated?.(tx, result.run)
        return result
      })
    let created = await create(input.ifActive === 'enqueue')
    // Interrupt: the new message supersedes everything still pending in the conversation — the queued
    // runs first (so ending the active one promotes none of them), then the active one.
    for (let attempt = 0; 'active' in created && input.ifActive === 'interrupt' && attempt < 5; attempt++) {
      await this.#supersede(conversation.id)
      created = await create(false)
    }
    // The owner of the project may write there (anyone else: the driver asks).
    if ('run' in created && created.run.status === 'running') this.#spawn(created.run.id, lease.owner, project?.ownerId === userId ? { writable: true } : {})
    // A queued run: the active one may have ended between our check and our commit; look again.
    else if ('run' in created) await this.#startNext(conversation.id)
    return created
  }

  /** Ends every queued and active run of a conversation as `superseded`, queued ones first. */
  async #supersede(conversationId: string): Promise<void> {
    const pending = await listRuns(this.#options.store.db, { conversationId, statuses: activeRunStatuses }, { limit: 200 })
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
    const run = await getRun(store.db, runId)
    if (!run || terminalRunStatuses.includes(run.status)) return run
    const driver = this.#drivers.get(runId)
    if (driver) {
      this.#abort(driver, reason)
      await driver.done
      const after = await getRun(store.db, runId)
      if (after && !terminalRunStatuses.includes(after.status)) await this.#end(runId, this.#cancelEnd(reason), { announce: true })
    } else {
      await this.#end(runId, this.#cancelEnd(reason), { announce: true })
    }
    this.#waiting.get(runId)?.abort(reason)
    return getRun(store.db, runId)
  }

  #cancelEnd(reason: string): RunEnd {
    // A superseded run's open calls expire (SPEC §6.1); a cancelled one's are cancelled.
    return { status: 'cancelled', reason, openCalls: reason === 'superseded' ? 'expired' : 'cancelled' }
  }

  #abort(driver: Driver, reason: StopReason): void {
    driver.loop.abort(reason)
    if (reason !== 'shutdown') driver.calls.abort(reason)
  }

  /** Another instance ended a run (null: any run, after a reconnect): drivers here that lost it stop. */
  #onRunEndedElsewhere(runId: string | null): void {
    const check = async (id: string): Promise<void> => {
      const driver = this.#drivers.get(id)
      const waiting = this.#waiting.get(id)
      if (!driver && !waiting) return
      const run = await getRun(this.#options.store.db, id)
      if (driver && (!run || run.status !== 'running' || run.leaseOwner !== driver.fence.owner)) this.#abort(driver, 'lease_lost')
      if (waiting && (!run || terminalRunStatuses.includes(run.status))) waiting.abort('cancelled')
    }
    const ids = runId ? [runId] : [...new Set([...this.#drivers.keys(), ...this.#waiting.keys()])]
    for (const id of ids) check(id).catch((error: unknown) => this.#options.log.warn('could not check a run another instance ended', { runId: id, error: String(error) }))
  }

  /**
   * Resolves with the run once it has ended or needs action (or, after `timeoutMs`, as it is then):
   * create-and-wait for scripts and clients that do not stream.
   */
  async waitUntilSettled(runId: string, timeoutMs: number): Promise<{ run: Run; settled: boolean }> {
    const { store } = this.#options
    const isSettled = (run: Run): boolean => terminalRunStatuses.includes(run.status) || run.status === 'requires_action'
    let wake: (() => void) | null = null
    const unsubscribe = store.feed.subscribe(`run:${runId}`, (event) => {
      if (event.type === 'run.status' || event.type.startsWith('run.')) wake?.()
    })
    const deadline = Date.now() + timeoutMs
    try {
      for (;;) {
        const run = await getRun(store.db, runId)
        if (!run) throw new Error(`run ${runId} vanished`)
        if (isSettled(run)) return { run, settled: true }
        const remaining = deadline - Date.now()
        if (remaining <= 0) return { run, settled: false }
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
    }
  }

  /** Client-tool results (SPEC §8.4). Returns an error text for calls that are not awaited. */
  async submitToolOutputs(runId: string, outputs: Array<{ callId: string; output: unknown }>): Promise<{ error?: string; run?: Run }> {
    const { store } = this.#options
    const run = await getRun(store.db, runId)
    if (!run) return { error: 'run not found' }
    if (run.status !== 'requires_action') return { error: `the run is ${run.status}, not waiting for tool outputs` }
    const calls = await listToolCalls(store.db, runId)
    for (const output of outputs) {
      const call = calls.find((candidate) => candidate.id === output.callId)
      if (!call || call.status !== 'awaiting_output') return { error: `call ${output.callId} is not waiting for an output` }
    }
    await store.transaction(async (tx) => {
      const locked = await lockRun(tx, runId)
      if (!locked || locked.status !== 'requires_action') return
      await lockAuditLog(tx)
      for (const output of outputs) {
        const call = calls.find((candidate) => candidate.id === output.callId)!
        const value = (output.output ?? null) as JsonValue
        const accepted = typeof value === 'object' && value !== null && !Array.isArray(value) ? value.accepted : undefined
        const status: ToolCallStatus = accepted === false ? ((value as { rejected?: unknown }).rejected ? 'rejected' : 'error') : 'ok'
        await this.#ledger.finish(tx, locked, call, status, value)
      }
    })
    await this.#resumeIfAnswered(runId)
    return { run: await getRun(store.db, runId) }
  }

  /**
   * Recovers what stopped drivers left behind: a running run whose lease has passed (its process
   * died, or shut down and released it) is taken over and resumed from its last checkpoint — no
   * completed tool call runs again — until it has been resumed `maxResumes` times, when it ends
   * failed `interrupted`. Also starts queues nobody started, continues waiting runs whose every call
   * is answered, and expires runs left waiting past their deadline.
   */
  async sweep(options: { orphansOnly?: boolean } = {}): Promise<{ resumed: number; failed: number }> {
    const { store } = this.#options
    const counts = { resumed: 0, failed: 0 }
    if (this.#stopping) return counts
    // With an exclusive database every running run not driven here is an orphan, whatever its lease says.
    const before = options.orphansOnly ? new Date(Date.UTC(9999, 0, 1)) : new Date()
    for (const run of await findRunsWithExpiredLease(store.db, before)) {
      if (this.#drivers.has(run.id) || this.#stopping) continue
      const taken = await this.#takeOver(run.id, before)
      if (taken) counts[taken]++
    }
    for (const run of await findAnsweredWaitingRuns(store.db)) await this.#resumeIfAnswered(run.id)
    for (const conversationId of await findStartableQueues(store.db)) await this.#startNext(conversationId)
    const ttl = this.#options.actionTtlMs ?? 24 * 3_600_000
    for (const run of await findRunsWaitingSince(store.db, new Date(Date.now() - ttl))) {
      await this.#end(run.id, { status: 'expired', openCalls: 'expired' })
      await this.#startNext(run.conversationId)
    }
    await this.#options.bus.expireOverdue()
    return counts
  }

  /** Takes over a run whose driver stopped; re-checks the lease under the row lock. */
  async #takeOver(runId: string, before: Date): Promise<'resumed' | 'failed' | undefined> {
    const lease = this.#newLease()
    const taken = await this.#options.store.transaction(async (tx) => {
      const run = await takeOverRun(tx, runId, lease, before)
      if (!run) return undefined
      // A turn cut off mid-stream is closed; its round is asked again (the iteration is not used up).
      const cut = await closeStreamingMessages(tx, runId, 'interrupted')
      const updated = cut > 0 ? await updateRun(tx, runId, { iteration: Math.max(0, run.iteration - 1) }) : run
      await appendEvents(tx, [runEvent(updated, 'run.status', { runId, status: updated.status, phase: updated.phase, resumed: true })])
      return updated
    })
    if (!taken) return undefined
    const fence = { runId, owner: lease.owner }
    if (taken.resumes > (this.#options.maxResumes ?? 3)) {
      const message = `the run was interrupted ${taken.resumes} times (a server stopped while driving it) and is not resumed again`
      await this.#end(runId, { status: 'failed', error: { code: 'interrupted', message }, openCalls: 'interrupted' }, { fence })
      await this.#startNext(taken.conversationId)
      return 'failed'
    }
    this.#spawn(runId, lease.owner, { resumed: true })
    return 'resumed'
  }

  /**
   * Resumes a run that failed upstream (or was interrupted) from its last checkpoint: the transcript
   * already holds every finished round, so no completed tool call runs again.
   */
  async resume(runId: string): Promise<{ run?: Run; error?: string; code?: 'run_active' | 'shutting_down' }> {
    const { store } = this.#options
    if (this.#stopping) return { error: 'the server is shutting down; try again in a moment', code: 'shutting_down' }
    const lease = this.#newLease()
    let resumed: { run?: Run; error?: string; code?: 'run_active' }
    try {
      resumed = await store.transaction(async (tx): Promise<{ run?: Run; error?: string }> => {
        const run = await lockRun(tx, runId)
        if (!run) return { error: 'run not found' }
        const code = (run.error as { code?: string } | null)?.code
        if (run.status !== 'failed' || !['upstream_error', 'upstream_auth_missing', 'timeout', 'interrupted', 'tools_unsupported'].includes(code ?? '')) {
          return { error: `only a run that failed upstream or was interrupted can be resumed (this one is ${run.status}${code ? `: ${code}` : ''})` }
        }
        const updated = await updateRun(tx, runId, { status: 'running', phase: 'thinking', error: null, lease })
        await appendEvents(tx, [runEvent(updated, 'run.status', { runId, status: updated.status, phase: updated.phase })])
        return { run: updated }
      })
    } catch (error) {
      // Only the one-active-run index means another run is active; anything else is a real failure.
      if (!isUniqueViolation(error)) throw error
      resumed = { error: 'another run is active in this conversation', code: 'run_active' }
    }
    if (resumed.run) this.#spawn(runId, lease.owner)
    return resumed
  }

  // --- the loop ------------------------------------------------------------------------------

  /** Starts the conversation's oldest queued run when nothing else there is active. */
  async #startNext(conversationId: string): Promise<void> {
    const { store } = this.#options
    if (this.#stopping) return // the next server (or another instance) starts it
    const queued = await nextQueuedRun(store.db, conversationId)
    if (!queued) return
    const lease = this.#newLease()
    let started: Run | undefined
    try {
      started = await store.transaction(async (tx) => {
        const locked = await lockRun(tx, queued.id)
        if (!locked || locked.status !== 'queued') return undefined
        const run = await updateRun(tx, queued.id, { status: 'running', phase: 'thinking', started: true, lease })
        await appendEvents(tx, [runEvent(run, 'run.status', { runId: run.id, status: run.status, phase: run.phase })])
        return run
      })
    } catch (error) {
      // The one-active-run index refused: another run became active first, and it starts this one when it ends.
      if (!isUniqueViolation(error)) throw error
    }
    if (started) this.#spawn(started.id, lease.owner)
  }

  #spawn(runId: string, owner: string, hints: { resumed?: boolean; writable?: boolean } = {}): void {
    const { store, log } = this.#options
    const fence = { runId, owner }
    if (this.#stopping) {
      // Not driven here after all: give the lease up so the next server resumes the run at once.
      void releaseLease(store.db, runId, owner).catch((error: unknown) => log.warn('could not release a run lease', { runId, error: String(error) }))
      return
    }
    const driver: Driver = { fence, resumed: hints.resumed ?? false, writable: hints.writable, loop: new AbortController(), calls: new AbortController(), done: Promise.resolve() }
    this.#drivers.set(runId, driver)
    driver.done = this.#loop(driver)
      .catch(async (error: unknown) => {
        if (error instanceof LeaseLost) {
          log.info('stopped driving a run that was ended or taken over elsewhere', { runId })
          return
        }
        log.error('run loop failed', { runId, error: error instanceof Error ? error.message : String(error) })
        await this.#end(runId, { status: 'failed', error: { code: 'internal', message: 'an internal error ended the run' }, openCalls: 'interrupted' }, { fence }).catch((endError: unknown) => {
          if (!(endError instanceof LeaseLost)) log.error('could not end a failed run', { runId, error: String(endError) })
        })
      })
      .finally(async () => {
        this.#drivers.delete(runId)
        try {
          const run = await getRun(store.db, runId)
          if (run && terminalRunStatuses.includes(run.status)) await this.#startNext(run.conversationId)
        } catch (error) {
          log.warn('could not start the next queued run', { runId, error: String(error) })
        }
      })
  }

  /**
   * One transaction under the run's lease; throws LeaseLost (writing nothing) when the lease has passed.
   * `audit`: it may end client calls, whose audit entries need the audit lock before any event is appended.
   */
  async #fenced<T>(fence: RunFence, fn: (tx: Executor, run: Run) => Promise<T>, options: { audit?: boolean; patch?: RunPatch } = {}): Promise<T> {
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

  async #loop(driver: Driver): Promise<void> {
    const { store, log } = this.#options
    const { fence } = driver
    const runId = fence.runId
    const signal = driver.loop.signal
    const heartbeat = setInterval(() => {
      renewLease(store.db, runId, fence.owner, this.#expiry())
        .then((held) => {
          if (!held) this.#abort(driver, 'lease_lost')
        })
        .catch((error: unknown) => log.warn('could not renew a run lease; the next write re-checks it', { runId, error: String(error) }))
    }, Math.max(500, this.#leaseMs() / 3))
    // A finished tool round is announced with the next round's opening transaction.
    let roundDone = false
    // Only a run taken over from a stopped driver can have calls left open from its last round.
    let first = driver.resumed
    let writable = driver.writable
    // The run as this driver last wrote it: its only writer need not read it back (a change made
    // elsewhere — a cancel, a takeover — makes the next fenced write fail).
    let known: Run | undefined
    try {
      for (;;) {
        let run = known ?? (await getRun(store.db, runId))
        known = undefined
        if (!run || run.status !== 'running' || run.leaseOwner !== fence.owner) return
        if (signal.aborted) return await this.#endAborted(run, driver, null, '')
        const model = this.#options.models.get(run.model)
        if (!model) return await this.#end(runId, { status: 'failed', error: { code: 'internal', message: `model ${run.model} is no longer configured` }, openCalls: 'interrupted' }, { fence })
        const atCap = run.iteration >= run.maxIterations
        writable ??= await this.#options.bus.mayWrite(run.ownerId, run.projectId)
        const tools = atCap || !model.supportsTools ? new Map<string, ToolEntry>() : this.#toolTable(run, writable)
        if (first) {
          first = false
          // Resumed after its driver stopped: calls of the last round not yet answered are dispatched
          // again under their idempotency keys (a finished dispatch answers with its recorded outcome).
          const open = (await listToolCalls(store.db, runId)).filter((call) => openStatuses.includes(call.status))
          if (open.length > 0) {
            const redo = open.filter((call) => call.status === 'pending' || call.status === 'running')
            const waiting = (await this.#runCalls(run, redo, this.#toolTable(run, writable), driver)) || redo.length < open.length
            if (signal.aborted) return await this.#endAborted(run, driver, null, '')
            if (waiting) return await this.#requireAction(fence)
            roundDone = true
          }
        }
        const iteration = run.iteration + 1
        // Only the tail that can fit the model's window is read (with room to spare for trimming by
        // whole turns): a long conversation costs no more per round than a short one.
        const transcript = await readTranscriptTail(store.db, run.conversationId, Math.ceil(model.contextWindow * 0.7 * 4 * 1.5))
        // Project knowledge is looked up once, at the start, and kept with the run (resume sees the same).
        const injected = run.knowledge === null ? await this.#retrieveKnowledge(run, transcript, signal) : null
        const knowledge = (injected ?? run.knowledge) as KnowledgeContext | null
        const messages = this.#history(run, model, atCap, transcript, knowledge)
        // One transaction opens the round: the previous round's tool_done, the new phase and the
        // assistant message the model's turn streams into.
        const patch: RunPatch = { iteration, phase: iteration === 1 ? 'thinking' : 'finalizing', ...(injected && { knowledge: injected as unknown as JsonValue }) }
        const opened = await this.#fenced(
          fence,
          async (tx, updated) => {
            const events = roundDone ? [runEvent(updated, 'run.status', { runId, status: updated.status, phase: 'tool_done' })] : []
            if (injected?.hits && injected.hits.length > 0) {
              events.push(
                runEvent(updated, 'knowledge.injected', {
                  runId,
                  chunkIds: injected.hits.map((hit) => hit.chunkId),
                  items: injected.hits.map((hit) => ({ itemId: hit.itemId, chunkId: hit.chunkId, title: hit.title, shared: hit.shared })),
                }),
              )
            }
            const messageId = await insertAssistantMessage(tx, updated)
            events.push(
              runEvent(updated, 'run.status', { runId, status: updated.status, phase: updated.phase }),
              runEvent(updated, 'round.started', { runId, iteration }),
              runEvent(updated, 'message.created', { messageId, role: 'assistant' }),
            )
            await appendEvents(tx, events)
            return { run: updated, messageId }
          },
          { patch },
        )
        run = opened.run
        roundDone = false
        const turn = await this.#modelTurn(run, model, tools, messages, opened.messageId, driver)
        if (turn.kind === 'ended') return // completed with its answer, failed, cancelled or suspended
        if (atCap) {
          // The last, tool-less call still asked for tools: nothing more runs; the calls are answered.
          const message = `the model still called tools after ${run.maxIterations} iterations (maxIterations)`
          await this.#end(runId, { status: 'failed', error: { code: 'iteration_cap', message }, openCalls: 'error' }, { fence })
          return
        }
        const waiting = await this.#runCalls(run, turn.calls, tools, driver)
        if (signal.aborted) return await this.#endAborted(run, driver, null, '')
        if (waiting) {
          await this.#requireAction(fence)
          return
        }
        roundDone = true
        known = turn.run
      }
    } finally {
      clearInterval(heartbeat)
    }
  }

  /** Streams one model turn into an assistant message. */
  async #modelTurn(
    run: Run,
    model: LanguageModel,
    tools: Map<string, ToolEntry>,
    messages: ModelMessage[],
    messageId: string,
    driver: Driver,
  ): Promise<{ kind: 'ended' } | { kind: 'turn'; calls: ToolCallRecord[]; run: Run }> {
    const { store } = this.#options
    const { fence } = driver
    const signal = driver.loop.signal
    let text = ''
    // Deltas are fenced too: once the lease has passed, nothing more streams from here.
    const coalescer = new DeltaCoalescer(50, (delta) => store.appendEvents([runEvent(run, 'message.delta', { messageId, text: delta })], fence).then(() => undefined))
    const calls: ModelToolCall[] = []
    let usage = { ...run.usage }
    const holdsSlot = await this.#modelSlots.acquire(signal)
    if (!holdsSlot) {
      // Stopped while waiting for a slot: the model was never called.
      await coalescer.close()
      await this.#endAborted(run, driver, messageId, '')
      return { kind: 'ended' }
    }
    const modelStarted = performance.now()
    let modelOutcome = 'ok'
    try {
      for await (const part of streamWithRetries(model, { messages, tools: [...tools.values()].map((entry) => entry.tool), params: run.profile.modelParams, signal })) {
        if (part.type === 'text-delta') {
          text += part.text
          coalescer.push(part.text)
        } else if (part.type === 'tool-call') calls.push(part.call)
        else if (part.type === 'usage') usage = { inputTokens: usage.inputTokens + part.usage.inputTokens, outputTokens: usage.outputTokens + part.usage.outputTokens }
      }
    } catch (error) {
      modelOutcome = error instanceof ModelError ? error.code : 'internal'
      await coalescer.close()
      if (signal.aborted || (error instanceof ModelError && error.code === 'cancelled')) {
        await this.#endAborted(run, driver, messageId, text)
        return { kind: 'ended' }
      }
      const failure =
        error instanceof ModelError
          ? { code: error.code === 'cancelled' ? 'upstream_error' : error.code, message: error.message, ...(error.upstreamStatus !== undefined && { upstreamStatus: error.upstreamStatus }) }
          : { code: 'internal', message: 'the model call failed' }
      const decisions = await this.#fenced(
        fence,
        async (tx, locked) => {
          await completeAssistantMessage(tx, messageId, text, null, 'failed')
          await appendEvents(tx, [runEvent(run, 'message.completed', { messageId, content: text, toolCalls: null, status: 'failed' })])
          return this.#ledger.end(tx, locked, { status: 'failed', error: failure, openCalls: 'interrupted', usage })
        },
        { audit: true },
      )
      await this.#expireDecisions(decisions)
      return { kind: 'ended' }
    } finally {
      if (holdsSlot) this.#modelSlots.release()
      this.#options.observer?.modelCall?.({ model: model.id, durationMs: performance.now() - modelStarted, outcome: signal.aborted ? 'cancelled' : modelOutcome })
    }
    await coalescer.close()
    if (signal.aborted) {
      await this.#endAborted(run, driver, messageId, text)
      return { kind: 'ended' }
    }
    // The turn and its calls are one checkpoint: message, ledger rows and events in one transaction.
    const ledger: ToolCallRecord[] = calls.map((call, seq) => {
      const entry = tools.get(call.name)
      return {
        id: newId(),
        runId: run.id,
        messageId,
        iteration: run.iteration,
        seq,
        providerCallId: call.id || `call_${seq}`,
        name: call.name,
        commandId: entry?.kind === 'command' ? entry.command.spec.id : null,
        kind: entry ? entry.kind : 'unknown',
        args: parseArguments(call.arguments).value,
        rawArgs: call.arguments,
        risk: null,
        status: 'pending',
        output: null,
        modelOutput: null,
        modelTruncated: false,
        dispatchId: null,
        decisionId: null,
        repeatOf: null,
      }
    })
    // With calls, the run's new state rides in the fence's statement.
    const checkpointPatch: RunPatch | undefined = ledger.length > 0 ? { usage, phase: 'tool_running' } : undefined
    let checkpointed: Run = run
    const decisions = await this.#fenced(fence, async (tx, locked) => {
      checkpointed = locked
      const stored: StoredToolCall[] = ledger.map((call) => ({ callId: call.id, providerCallId: call.providerCallId, name: call.name, arguments: call.rawArgs }))
      await completeAssistantMessage(tx, messageId, text, stored, 'completed')
      const events = [runEvent(run, 'message.completed', { messageId, content: text, toolCalls: stored.length > 0 ? stored : null, status: 'completed' })]
      if (ledger.length === 0) {
        // No calls: the text is the answer, and the run completes in the same transaction.
        await appendEvents(tx, events)
        // Nothing is open (every earlier round was answered) and the only turn just completed.
        return this.#ledger.end(tx, locked, { status: 'completed', usage, clean: true })
      }
      for (const call of ledger) {
        const risk = call.kind === 'client' && call.name === proposeCommandTool.name ? this.#options.bus.classifyCommandLine(String((call.args as { command?: unknown } | null)?.command ?? '')) : null
        call.risk = risk?.risk ?? (call.kind === 'command' ? commandRisk(tools.get(call.name)) : null)
        await insertToolCall(tx, call)
        events.push(
          runEvent(run, 'tool_call.created', {
            runId: run.id,
            callId: call.id,
            providerCallId: call.providerCallId,
            name: call.name,
            commandId: call.commandId,
            kind: call.kind === 'unknown' ? 'command' : call.kind,
            args: call.args,
            risk: call.risk,
            ...(risk && { matchedRules: risk.matchedRules }),
          }),
        )
      }
      // The checkpoint also announces tool_called and moves on to tool_running.
      events.push(runEvent(locked, 'run.status', { runId: run.id, status: locked.status, phase: 'tool_called' }))
      events.push(runEvent(locked, 'run.status', { runId: run.id, status: locked.status, phase: 'tool_running' }))
      await appendEvents(tx, events)
      return []
    }, checkpointPatch && { patch: checkpointPatch })
    if (ledger.length === 0) {
      await this.#expireDecisions(decisions)
      return { kind: 'ended' }
    }
    return { kind: 'turn', calls: ledger, run: checkpointed }
  }

  /** Dispatches a round's calls in order. Returns true when any waits for a human or the client. */
  async #runCalls(run: Run, calls: ToolCallRecord[], tools: Map<string, ToolEntry>, driver: Driver): Promise<boolean> {
    const { store, bus } = this.#options
    const { fence } = driver
    let waiting = false
    // Earlier results are looked up only for calls that may reuse them (idempotent commands).
    let earlier: ToolCallRecord[] | undefined
    for (const call of calls) {
      if (driver.loop.signal.aborted) return waiting
      const entry = tools.get(call.name)
      const parsed = parseArguments(call.rawArgs)
      const fail = (output: JsonValue) => this.#fenced(fence, (tx, locked) => this.#ledger.finish(tx, locked, call, 'error', output))
      if (!entry) {
        await fail({ error: { code: 'unknown_tool', message: `there is no tool named ${call.name}; use one of the offered tools` } })
        continue
      }
      if (parsed.error || parsed.value === null || typeof parsed.value !== 'object' || Array.isArray(parsed.value)) {
        await fail({ error: { code: 'invalid_arguments', message: `the arguments are not a JSON object: ${parsed.error ?? 'wrong type'}` } })
        continue
      }
      if (entry.kind === 'client') {
        this.#ledger.started(call.id)
        await this.#fenced(fence, async (tx, locked) => {
          await updateToolCall(tx, call.id, { status: 'awaiting_output', started: true })
          await bus.auditClientCall(tx, clientCallAudit(locked, call))
          await appendEvents(tx, [runEvent(locked, 'tool_call.started', { callId: call.id })])
        })
        waiting = true
        continue
      }
      const params = parsed.value as { [key: string]: JsonValue }
      // An identical read-only call in this run returns the earlier ok result again.
      if (entry.command.spec.idempotent) {
        const hash = hashParams(params)
        earlier ??= await listToolCalls(store.db, run.id)
        const previous = earlier.find((candidate) => candidate.status === 'ok' && candidate.name === call.name && candidate.args !== null && hashParams(candidate.args as { [key: string]: JsonValue }) === hash)
        if (previous) {
          await this.#fenced(fence, (tx, locked) => this.#ledger.finish(tx, locked, call, 'ok', previous.output, { repeatOf: previous.id }))
          continue
        }
      }
      this.#ledger.started(call.id)
      // The call's own writes ride in the dispatch's transactions, fenced by the lease: `running` with
      // the dispatch row (a driver that lost the lease dispatches nothing), the result (or the wait for
      // a decision) with the dispatch's outcome (a driver that lost it meanwhile records nothing: the
      // run's new owner, or whoever ended it, has answered the call).
      let recorded = false
      let lost = false
      // Each of the dispatch's transactions fences the run first (before the bus's audit and event locks).
      let locked: Run | undefined
      const lock = async (tx: Executor): Promise<void> => {
        locked = await fenceRun(tx, fence.runId, fence.owner, this.#expiry())
      }
      const record = async (tx: Executor, outcome: DispatchOutcome): Promise<void> => {
        recorded = true
        if (!locked) {
          lost = true
          return
        }
        if (outcome.status === 'awaiting_decision') {
          await updateToolCall(tx, call.id, { status: 'awaiting_decision', dispatchId: outcome.dispatchId, decisionId: outcome.decision.id })
        } else {
          await this.#ledger.applyOutcome(tx, locked, call, outcome)
        }
      }
      const outcome = await bus.dispatch({
        commandId: entry.command.spec.id,
        params,
        entrance: 'agent',
        actor: { type: 'agent', id: run.id, onBehalfOf: run.ownerId },
        conversationId: run.conversationId,
        projectId: run.projectId,
        runId: run.id,
        callId: call.id,
        idempotencyKey: `${run.id}:${call.id}`,
        // A call of this driver's own round has never been dispatched (a resumed run's may have been).
        fresh: !driver.resumed,
        approvalPolicy: run.approvalPolicy,
        signal: driver.calls.signal,
        within: {
          lock,
          persisted: async (tx) => {
            if (!locked) throw new LeaseLost()
            await updateToolCall(tx, call.id, { status: 'running', started: true })
            await appendEvents(tx, [runEvent(locked, 'tool_call.started', { callId: call.id })])
          },
          settled: record,
        },
      })
      // A replayed outcome (the dispatch already existed) ran no hook.
      if (!recorded) {
        await store.transaction(async (tx) => {
          await lock(tx)
          await record(tx, outcome)
        })
      }
      if (lost) throw new LeaseLost()
      if (outcome.status === 'awaiting_decision') {
        waiting = true
        continue
      }
      if (outcome.status === 'succeeded') earlier?.push({ ...call, status: 'ok', output: outcome.result })
    }
    return waiting
  }

  /** The round waits for humans or the client: the lease is given up until every call is answered. */
  async #requireAction(fence: RunFence): Promise<void> {
    await this.#fenced(fence, async (tx) => {
      const requiredAction = await this.#ledger.requiredAction(tx, fence.runId)
      const updated = await updateRun(tx, fence.runId, { status: 'requires_action', phase: null, requiredAction, lease: null, waiting: true })
      await appendEvents(tx, [runEvent(updated, 'run.status', { runId: fence.runId, status: updated.status, phase: null, requiredAction })])
    })
  }

  /**
   * A decision about one of a run's calls, inside the bus's transaction that records it: the call's
   * result is written there, so an executed call can never end up marked otherwise. A decision that
   * expired while its run waited ends the run `expired` (SPEC §6.1).
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
      await appendEvents(tx, [runEvent(updated, 'run.status', { runId, status: updated.status, phase: null, requiredAction })])
    }
  }

  /** After a decision committed: continue the run once nothing is awaited, or tidy up after it ended. */
  async #afterDecision(runId: string): Promise<void> {
    const run = await getRun(this.#options.store.db, runId)
    if (!run) return
    if (terminalRunStatuses.includes(run.status)) {
      this.#waiting.delete(runId)
      await this.#expireDecisions(await pendingDecisionIds(this.#options.store.db, runId))
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
      const updated = await updateRun(tx, runId, { status: 'running', phase: 'tool_done', requiredAction: null, lease, waiting: false })
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
          await appendEvents(tx, [runEvent(locked, 'message.completed', { messageId, content: text, toolCalls: null, status: 'interrupted' })])
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
          await appendEvents(tx, [runEvent(locked, 'message.completed', { messageId, content: text, toolCalls: null, status: 'cancelled' })])
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
      await this.#options.bus.expireDecision(decisionId).catch((error: unknown) => this.#options.log.warn('could not expire a decision of an ended run', { decisionId, error: String(error) }))
    }
  }

  /** Exposed commands the agent may call (the project's subset, when it sets one), with their tool names. */
  *#commandTools(subset: string[] | null): Generator<{ toolName: string; commandId: string; command: RegisteredCommand }> {
    const allowed = subset === null ? null : new Set(subset)
    for (const command of this.#options.bus.catalog.list()) {
      const toolName = command.toolName
      if (!toolName) continue
      if (allowed && !allowed.has(command.spec.id)) continue
      if (command.spec.entrances && !command.spec.entrances.includes('agent')) continue
      yield { toolName, commandId: command.spec.id, command }
    }
  }

  /**
   * The model's tools: exposed commands plus the run's client tools. An owner who may only read the
   * project (shared read-only) is offered the read-only commands alone: the others would be refused.
   */
  #toolTable(run: Run, writable = true): Map<string, ToolEntry> {
    const table = new Map<string, ToolEntry>()
    for (const { command, toolName } of this.#commandTools(run.profile.tools)) {
      if (!writable && !command.spec.idempotent) continue
      // Providers get a projection; the command's own schema is still enforced on dispatch.
      const projected = projectToolSchema(command.spec.paramsSchema)
      const description = projected.descriptionSuffix ? `${command.spec.description}\n\n${projected.descriptionSuffix}` : command.spec.description
      table.set(toolName, { kind: 'command', command, tool: { name: toolName, description, parameters: projected.parameters } })
    }
    for (const tool of (run.clientTools as unknown as ModelTool[]) ?? []) table.set(tool.name, { kind: 'client', tool })
    return table
  }

  /** The top knowledge hits for the run's user message, or `{hits: []}` when there are none (or retrieval failed). */
  async #retrieveKnowledge(run: Run, transcript: readonly TranscriptMessage[], signal: AbortSignal): Promise<KnowledgeContext> {
    const retriever = this.#options.retriever
    const input = transcript.findLast((message) => message.role === 'user')?.content
    if (!retriever || !input) return { hits: [] }
    try {
      // One cheap look instead of a full hybrid search (several queries) in a project with no knowledge.
      if (!(await hasKnowledge(this.#options.store.db, run.projectId))) return { hits: [] }
      const hits = await retriever.retrieveShared(run.ownerId, input, { projectId: run.projectId, k: 8, signal })
      return { hits: selectForInjection(hits) }
    } catch (error) {
      this.#options.log.warn('knowledge retrieval for the prompt failed; the run goes on without it', { runId: run.id, error: String(error) })
      return { hits: [] }
    }
  }

  #history(run: Run, model: LanguageModel, atCap: boolean, transcript: TranscriptMessage[], knowledge: KnowledgeContext | null): ModelMessage[] {
    const notes = this.#options.bus.catalog.notes
    const skills = this.#options.bus.catalog.skills
    const system = [
      baseSystemPrompt,
      this.#options.systemPrompt,
      run.profile.systemPrompt,
      ...notes,
      skills.length > 0 ? `Skills you can follow:\n${skills.map((skill) => `- ${skill.name}: ${skill.description}`).join('\n')}` : undefined,
      model.supportsTools ? undefined : noToolsPrompt,
      knowledge?.hits && knowledge.hits.length > 0 ? knowledgeBlock(knowledge.hits) : undefined,
    ]
      .filter(Boolean)
      .join('\n\n')
    const history = trimToBudget(buildModelMessages(transcript), Math.floor(model.contextWindow * 0.7) - Math.ceil(system.length / 4))
    return [{ role: 'system', content: system }, ...history, ...(atCap ? [{ role: 'system' as const, content: capPrompt }] : [])]
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

/** Arguments are JSON text; a JSON string holding JSON (double encoding) is unwrapped once. */
function parseArguments(raw: string): { value: JsonValue | null; error?: string } {
  if (raw.trim() === '') return { value: {} }
  try {
    let value = JSON.parse(raw) as JsonValue
    if (typeof value === 'string') {
      try {
        value = JSON.parse(value) as JsonValue
      } catch {
        return { value: null, error: 'a JSON string that does not hold a JSON object' }
      }
    }
    return { value }
  } catch (error) {
    return { value: null, error: (error as Error).message }
  }
}

function commandRisk(entry: ToolEntry | undefined): string | null {
  if (entry?.kind !== 'command') return null
  const spec = entry.command.spec
  if (spec.exposeAsTool?.risk) return spec.exposeAsTool.risk
  return typeof spec.risk === 'string' ? spec.risk : 'dynamic'
}
