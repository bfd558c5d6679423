import { randomUUID } from 'node:crypto'
import { classifyCommandLine, hashParams, type CommandBus, type DecisionView, type DispatchOutcome, type RegisteredCommand } from '../cmdbus/index.js'
import type { JsonValue, PluginLogger } from '../extension/index.js'
import { ModelError, projectToolSchema, streamWithRetries, type LanguageModel, type ModelMessage, type ModelRegistry, type ModelTool, type ModelToolCall } from '../llm/index.js'
import type { Retriever } from '../rag/index.js'
import {
  activeRunStatuses,
  appendEvents,
  closeStreamingMessages,
  completeAssistantMessage,
  createRun,
  findRunsWaitingSince,
  findRunsWithExpiredLease,
  getProject,
  getRun,
  insertAssistantMessage,
  insertToolCall,
  insertToolMessage,
  listRuns,
  listToolCalls,
  lockRun,
  newId,
  nextQueuedRun,
  readTranscript,
  runEvent,
  terminalRunStatuses,
  updateRun,
  updateToolCall,
  type Conversation,
  type Executor,
  type ModelParams,
  type Run,
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
import { capForModel } from './tool-output.js'

/** Told about what runs do, for metrics. Every method is optional and must not throw. */
export interface RunObserver {
  modelCall?(figures: { model: string; durationMs: number; outcome: string }): void
  toolCall?(figures: { status: string }): void
  runEnded?(figures: { status: string; durationMs: number | null }): void
}

export interface RunManagerOptions {
  /** Metrics hooks. */
  observer?: RunObserver
  store: Store
  bus: CommandBus
  models: ModelRegistry
  log: PluginLogger
  /** Bytes of a tool result the model reads (PLINTH_TOOL_OUTPUT_LIMIT). */
  toolOutputLimit?: number
  /** A running run's lease; a run whose lease ran out is swept (its process died). */
  leaseMs?: number
  /** Extra system-prompt text (plugin notes are added automatically). */
  systemPrompt?: string
  /** Model calls in flight across all runs. */
  maxConcurrentModelCalls?: number
  /** A run waiting longer than this for humans or client tools ends `expired` (PLINTH_ACTION_TTL). */
  actionTtlMs?: number
  /**
   * The database belongs to this process alone (embedded PGlite): at start, every `running` run is
   * an orphan of a previous process and is recovered at once instead of after its lease.
   */
  exclusiveDatabase?: boolean
  /** Project knowledge put in front of the model at the start of a run (off without it). */
  retriever?: Retriever
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

/** How a run ends. */
interface RunEnd {
  status: 'completed' | 'failed' | 'cancelled' | 'expired'
  reason?: string
  error?: { [key: string]: JsonValue }
  /** The result open calls get; `error` carries the run's error code. */
  openCalls?: 'cancelled' | 'interrupted' | 'expired' | 'error'
  usage?: Run['usage']
}

/**
 * Runs the agent's ReAct loop (SPEC §6): stream the model, dispatch its tool calls through the
 * command bus, pause for humans, continue, finish. Every state change is written (with its event)
 * before it is announced; every tool call ends with exactly one terminal result.
 */
export class RunManager {
  readonly #options: RunManagerOptions
  readonly #instanceId = randomUUID()
  readonly #controllers = new Map<string, AbortController>()
  readonly #loops = new Map<string, Promise<void>>()
  #sweeper: NodeJS.Timeout | null = null
  #unsubscribe: (() => void) | null = null
  readonly #modelSlots: ModelSlots
  /** When each call started, for `tool_call.completed.durationMs` (in memory: only this process times it). */
  readonly #callStarts = new Map<string, number>()

  constructor(options: RunManagerOptions) {
    this.#options = options
    this.#modelSlots = new ModelSlots(options.maxConcurrentModelCalls ?? 16)
  }

  /** Subscribes to decisions and starts the sweeper (which also recovers runs a crash left behind). */
  async start(): Promise<void> {
    this.#unsubscribe = this.#options.bus.onDecisionResolved((decision, outcome) => {
      if (!decision.runId) return
      this.#onDecision(decision, outcome).catch((error: unknown) => this.#options.log.error('could not apply a decision to its run', { runId: decision.runId, error: String(error) }))
    })
    // Dispatches first: a run's interrupted tool call then finds its dispatch ended too.
    await this.#options.bus.sweepOrphanedDispatches({ all: this.#options.exclusiveDatabase === true })
    const recovered = await this.sweep({ orphansOnly: this.#options.exclusiveDatabase === true })
    if (recovered > 0) this.#options.log.info(`recovered ${recovered} runs`, { recovered, outcome: 'ended failed (interrupted); open calls answered; resume with POST /api/runs/:id/resume' })
    this.#sweeper = setInterval(() => void this.#sweepOnce(), Math.max(1000, (this.#options.leaseMs ?? 30_000) / 2))
    this.#sweeper.unref()
  }

  /** One pass of the periodic sweeper: orphaned dispatches, then runs whose lease has passed. */
  async #sweepOnce(): Promise<void> {
    try {
      await this.#options.bus.sweepOrphanedDispatches({ all: false })
      const count = await this.sweep()
      if (count > 0) this.#options.log.info(`recovered ${count} runs`, { recovered: count })
    } catch (error) {
      this.#options.log.warn('the run sweeper failed; it tries again', { error: String(error) })
    }
  }

  /** Ends in-flight runs as interrupted (answering their open calls) and stops. */
  async stop(): Promise<void> {
    if (this.#sweeper) clearInterval(this.#sweeper)
    this.#unsubscribe?.()
    for (const controller of this.#controllers.values()) controller.abort('shutdown')
    await Promise.allSettled([...this.#loops.values()])
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
    const maxIterations = input.maxIterations ?? 10
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
          { allowQueue, lease: this.#lease() },
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
    if ('run' in created && created.run.status === 'running') this.#spawn(created.run.id)
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

  /** Cancels a run (idempotent for finished runs). Resolves with the run as it ends. */
  async cancel(runId: string, reason = 'cancelled'): Promise<Run | undefined> {
    const { store } = this.#options
    const run = await getRun(store.db, runId)
    if (!run || terminalRunStatuses.includes(run.status)) return run
    const controller = this.#controllers.get(runId)
    if (controller) {
      controller.abort(reason)
      await this.#loops.get(runId)
      return getRun(store.db, runId)
    }
    await this.#end(runId, { status: 'cancelled', reason, openCalls: reason === 'superseded' ? 'expired' : 'cancelled' })
    return getRun(store.db, runId)
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
      for (const output of outputs) {
        const call = calls.find((candidate) => candidate.id === output.callId)!
        const value = (output.output ?? null) as JsonValue
        const accepted = typeof value === 'object' && value !== null && !Array.isArray(value) ? value.accepted : undefined
        const status: ToolCallStatus = accepted === false ? ((value as { rejected?: unknown }).rejected ? 'rejected' : 'error') : 'ok'
        await this.#finishCall(tx, locked, call, status, value)
      }
    })
    await this.#resumeIfAnswered(runId)
    return { run: await getRun(store.db, runId) }
  }

  /**
   * Ends runs whose lease ran out (their process died) as failed `interrupted`, answering their open
   * calls, and expires runs left waiting past their deadline. A completed tool call is never run again.
   */
  async sweep(options: { orphansOnly?: boolean } = {}): Promise<number> {
    const { store } = this.#options
    let recovered = 0
    // With an exclusive database every running run not driven here is an orphan, whatever its lease says.
    const cutoff = options.orphansOnly ? new Date(Date.UTC(9999, 0, 1)) : new Date()
    for (const run of await findRunsWithExpiredLease(store.db, cutoff)) {
      if (this.#controllers.has(run.id)) continue
      await this.#end(run.id, { status: 'failed', error: { code: 'interrupted', message: 'the server stopped while the run was in progress' }, openCalls: 'interrupted' })
      recovered++
      await this.#startNext(run.conversationId)
    }
    const ttl = this.#options.actionTtlMs ?? 24 * 3_600_000
    for (const run of await findRunsWaitingSince(store.db, new Date(Date.now() - ttl))) {
      await this.#end(run.id, { status: 'expired', openCalls: 'expired' })
      await this.#startNext(run.conversationId)
    }
    await this.#options.bus.expireOverdue()
    return recovered
  }

  /**
   * Resumes a run that failed upstream (or was interrupted) from its last checkpoint: the transcript
   * already holds every finished round, so no completed tool call runs again.
   */
  async resume(runId: string): Promise<{ run?: Run; error?: string }> {
    const { store } = this.#options
    const resumed: { run?: Run; error?: string } = await store
      .transaction(async (tx): Promise<{ run?: Run; error?: string }> => {
        const run = await lockRun(tx, runId)
        if (!run) return { error: 'run not found' }
        const code = (run.error as { code?: string } | null)?.code
        if (run.status !== 'failed' || !['upstream_error', 'upstream_auth_missing', 'timeout', 'interrupted', 'tools_unsupported'].includes(code ?? '')) {
          return { error: `only a run that failed upstream or was interrupted can be resumed (this one is ${run.status}${code ? `: ${code}` : ''})` }
        }
        const updated = await updateRun(tx, runId, { status: 'running', phase: 'thinking', error: null, lease: this.#lease() })
        await appendEvents(tx, [runEvent(updated, 'run.status', { runId, status: updated.status, phase: updated.phase })])
        return { run: updated }
      })
      .catch((): { error: string } => ({ error: 'another run is active in this conversation' }))
    if (resumed.run) this.#spawn(runId)
    return resumed
  }

  // --- the loop ------------------------------------------------------------------------------

  /** Starts the conversation's oldest queued run when nothing else there is active. */
  async #startNext(conversationId: string): Promise<void> {
    const { store } = this.#options
    const queued = await nextQueuedRun(store.db, conversationId)
    if (!queued) return
    const started = await store
      .transaction(async (tx) => {
        const locked = await lockRun(tx, queued.id)
        if (!locked || locked.status !== 'queued') return undefined
        const run = await updateRun(tx, queued.id, { status: 'running', phase: 'thinking', started: true, lease: this.#lease() })
        await appendEvents(tx, [runEvent(run, 'run.status', { runId: run.id, status: run.status, phase: run.phase })])
        return run
      })
      .catch(() => undefined) // the unique index refused: another run became active first
    if (started) this.#spawn(started.id)
  }

  #spawn(runId: string): void {
    const controller = new AbortController()
    this.#controllers.set(runId, controller)
    const loop = this.#loop(runId, controller.signal)
      .catch(async (error: unknown) => {
        this.#options.log.error('run loop failed', { runId, error: error instanceof Error ? error.message : String(error) })
        await this.#end(runId, { status: 'failed', error: { code: 'internal', message: 'an internal error ended the run' }, openCalls: 'interrupted' }).catch(() => undefined)
      })
      .finally(async () => {
        this.#controllers.delete(runId)
        this.#loops.delete(runId)
        const run = await getRun(this.#options.store.db, runId).catch(() => undefined)
        if (run && terminalRunStatuses.includes(run.status)) await this.#startNext(run.conversationId).catch(() => undefined)
      })
    this.#loops.set(runId, loop)
  }

  async #loop(runId: string, signal: AbortSignal): Promise<void> {
    const { store } = this.#options
    const heartbeat = setInterval(() => {
      void store.transaction((tx) => updateRun(tx, runId, { lease: this.#lease() })).catch(() => undefined)
    }, Math.max(500, (this.#options.leaseMs ?? 30_000) / 3))
    // A finished tool round is announced with the next round's opening transaction.
    let roundDone = false
    try {
      for (;;) {
        let run = (await getRun(store.db, runId))!
        if (run.status !== 'running') return
        if (signal.aborted) return await this.#endAborted(run, signal, null, '')
        const model = this.#options.models.get(run.model)
        if (!model) return await this.#end(runId, { status: 'failed', error: { code: 'internal', message: `model ${run.model} is no longer configured` }, openCalls: 'interrupted' })
        const atCap = run.iteration >= run.maxIterations
        const tools = atCap || !model.supportsTools ? new Map<string, ToolEntry>() : this.#toolTable(run)
        const iteration = run.iteration + 1
        const transcript = await readTranscript(store.db, run.conversationId)
        // Project knowledge is looked up once, at the start, and kept with the run (resume sees the same).
        const injected = run.knowledge === null ? await this.#retrieveKnowledge(run, transcript, signal) : null
        const knowledge = (injected ?? run.knowledge) as KnowledgeContext | null
        const messages = this.#history(run, model, atCap, transcript, knowledge)
        // One transaction opens the round: the previous round's tool_done, the new phase and the
        // assistant message the model's turn streams into.
        const opened = await store.transaction(async (tx) => {
          const events = roundDone ? [runEvent(run, 'run.status', { runId, status: run.status, phase: 'tool_done' })] : []
          const updated = await updateRun(tx, runId, { iteration, phase: iteration === 1 ? 'thinking' : 'finalizing', ...(injected && { knowledge: injected as unknown as JsonValue }) })
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
        })
        run = opened.run
        roundDone = false
        const turn = await this.#modelTurn(run, model, tools, messages, opened.messageId, signal)
        if (turn.kind === 'ended') return // completed with its answer, failed or cancelled
        if (atCap) {
          // The last, tool-less call still asked for tools: nothing more runs; the calls are answered.
          const message = `the model still called tools after ${run.maxIterations} iterations (maxIterations)`
          await this.#end(runId, { status: 'failed', error: { code: 'iteration_cap', message }, openCalls: 'error' })
          return
        }
        const waiting = await this.#runCalls(run, turn.calls, tools, signal)
        if (signal.aborted) return await this.#endAborted((await getRun(store.db, runId))!, signal, null, '')
        if (waiting) {
          await this.#requireAction(runId)
          return
        }
        roundDone = true
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
    signal: AbortSignal,
  ): Promise<{ kind: 'ended' } | { kind: 'turn'; calls: ToolCallRecord[] }> {
    const { store } = this.#options
    let text = ''
    const coalescer = new DeltaCoalescer(50, (delta) =>
      store.appendEvents([runEvent(run, 'message.delta', { messageId, text: delta })]).then(() => undefined),
    )
    const calls: ModelToolCall[] = []
    let usage = { ...run.usage }
    const holdsSlot = await this.#modelSlots.acquire(signal)
    if (!holdsSlot) {
      // Cancelled while waiting for a slot: the model was never called.
      await coalescer.close()
      await this.#endAborted(run, signal, messageId, '')
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
        await this.#endAborted(run, signal, messageId, text)
        return { kind: 'ended' }
      }
      const failure =
        error instanceof ModelError
          ? { code: error.code === 'cancelled' ? 'upstream_error' : error.code, message: error.message, ...(error.upstreamStatus !== undefined && { upstreamStatus: error.upstreamStatus }) }
          : { code: 'internal', message: 'the model call failed' }
      await store.transaction(async (tx) => {
        await completeAssistantMessage(tx, messageId, text, null, 'failed')
        await appendEvents(tx, [runEvent(run, 'message.completed', { messageId, content: text, toolCalls: null, status: 'failed' })])
      })
      await this.#end(run.id, { status: 'failed', error: failure, openCalls: 'interrupted', usage })
      return { kind: 'ended' }
    } finally {
      if (holdsSlot) this.#modelSlots.release()
      this.#options.observer?.modelCall?.({ model: model.id, durationMs: performance.now() - modelStarted, outcome: signal.aborted ? 'cancelled' : modelOutcome })
    }
    await coalescer.close()
    if (signal.aborted) {
      await this.#endAborted(run, signal, messageId, text)
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
    const decisions = await store.transaction(async (tx) => {
      const stored: StoredToolCall[] = ledger.map((call) => ({ callId: call.id, providerCallId: call.providerCallId, name: call.name, arguments: call.rawArgs }))
      await completeAssistantMessage(tx, messageId, text, stored, 'completed')
      const events = [runEvent(run, 'message.completed', { messageId, content: text, toolCalls: stored.length > 0 ? stored : null, status: 'completed' })]
      if (ledger.length === 0) {
        // No calls: the text is the answer, and the run completes in the same transaction.
        await appendEvents(tx, events)
        return this.#endIn(tx, run.id, { status: 'completed', usage })
      }
      for (const call of ledger) {
        const risk = call.kind === 'client' && call.name === proposeCommandTool.name ? classifyCommandLine(String((call.args as { command?: unknown } | null)?.command ?? '')) : null
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
      const patch: RunPatch = { usage, phase: 'tool_running' }
      const updated = await updateRun(tx, run.id, patch)
      events.push(runEvent(updated, 'run.status', { runId: run.id, status: updated.status, phase: 'tool_called' }))
      events.push(runEvent(updated, 'run.status', { runId: run.id, status: updated.status, phase: 'tool_running' }))
      await appendEvents(tx, events)
      return []
    })
    if (ledger.length === 0) {
      await this.#expireDecisions(decisions)
      return { kind: 'ended' }
    }
    return { kind: 'turn', calls: ledger }
  }

  /** Dispatches a round's calls in order. Returns true when any waits for a human or the client. */
  async #runCalls(run: Run, calls: ToolCallRecord[], tools: Map<string, ToolEntry>, signal: AbortSignal): Promise<boolean> {
    const { store, bus } = this.#options
    let waiting = false
    const earlier = await listToolCalls(store.db, run.id)
    for (const call of calls) {
      if (signal.aborted) return waiting
      const entry = tools.get(call.name)
      const parsed = parseArguments(call.rawArgs)
      const fail = (output: JsonValue) => store.transaction((tx) => this.#finishCall(tx, run, call, 'error', output))
      if (!entry) {
        await fail({ error: { code: 'unknown_tool', message: `there is no tool named ${call.name}; use one of the offered tools` } })
        continue
      }
      if (parsed.error || parsed.value === null || typeof parsed.value !== 'object' || Array.isArray(parsed.value)) {
        await fail({ error: { code: 'invalid_arguments', message: `the arguments are not a JSON object: ${parsed.error ?? 'wrong type'}` } })
        continue
      }
      if (entry.kind === 'client') {
        this.#callStarts.set(call.id, performance.now())
        await store.transaction(async (tx) => {
          await updateToolCall(tx, call.id, { status: 'awaiting_output', started: true })
          await appendEvents(tx, [runEvent(run, 'tool_call.started', { callId: call.id })])
        })
        waiting = true
        continue
      }
      const params = parsed.value as { [key: string]: JsonValue }
      // An identical read-only call in this run returns the earlier ok result again.
      if (entry.command.spec.idempotent) {
        const hash = hashParams(params)
        const previous = earlier.find((candidate) => candidate.status === 'ok' && candidate.name === call.name && candidate.args !== null && hashParams(candidate.args as { [key: string]: JsonValue }) === hash)
        if (previous) {
          await store.transaction((tx) => this.#finishCall(tx, run, call, 'ok', previous.output, { repeatOf: previous.id }))
          continue
        }
      }
      this.#callStarts.set(call.id, performance.now())
      // The call's own writes ride in the dispatch's transactions: `running` with the dispatch row,
      // the result (or the wait for a decision) with the dispatch's outcome.
      let recorded = false
      const record = async (tx: Executor, outcome: DispatchOutcome): Promise<void> => {
        if (outcome.status === 'awaiting_decision') {
          await updateToolCall(tx, call.id, { status: 'awaiting_decision', dispatchId: outcome.dispatchId, decisionId: outcome.decision.id })
        } else {
          await this.#applyOutcome(tx, run, call, outcome)
        }
        recorded = true
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
        approvalPolicy: run.approvalPolicy,
        signal,
        within: {
          persisted: async (tx) => {
            await updateToolCall(tx, call.id, { status: 'running', started: true })
            await appendEvents(tx, [runEvent(run, 'tool_call.started', { callId: call.id })])
          },
          settled: record,
        },
      })
      // A replayed outcome (the dispatch already existed) ran no hook.
      if (!recorded) await store.transaction((tx) => record(tx, outcome))
      if (outcome.status === 'awaiting_decision') {
        waiting = true
        continue
      }
      if (outcome.status === 'succeeded') earlier.push({ ...call, status: 'ok', output: outcome.result })
    }
    return waiting
  }

  async #applyOutcome(tx: Executor, run: Run, call: ToolCallRecord, outcome: DispatchOutcome): Promise<void> {
    if (outcome.status === 'succeeded') return this.#finishCall(tx, run, call, 'ok', outcome.result, { dispatchId: outcome.dispatchId })
    if (outcome.status === 'awaiting_decision') return
    const error = outcome.error
    if (outcome.status === 'rejected' || error.code === 'rejected' || error.code === 'denied') {
      return this.#finishCall(tx, run, call, 'rejected', { accepted: false, rejected: true, ...(error.code === 'denied' && { reason: error.message }) }, { dispatchId: outcome.dispatchId })
    }
    if (outcome.status === 'expired') return this.#finishCall(tx, run, call, 'expired', { accepted: false, expired: true }, { dispatchId: outcome.dispatchId })
    if (outcome.status === 'cancelled') return this.#finishCall(tx, run, call, 'cancelled', { accepted: false, cancelled: true }, { dispatchId: outcome.dispatchId })
    return this.#finishCall(tx, run, call, 'error', { error: JSON.parse(JSON.stringify(error)) as JsonValue }, { dispatchId: outcome.dispatchId })
  }

  /** Writes a call's one terminal result: ledger row, tool message and event, in the caller's transaction. */
  async #finishCall(
    tx: Executor,
    run: Run,
    call: ToolCallRecord,
    status: ToolCallStatus,
    output: JsonValue,
    extra: { dispatchId?: string | null; repeatOf?: string } = {},
  ): Promise<void> {
    const modelText = status === 'ok' && call.commandId ? this.#options.bus.catalog.get(call.commandId)?.modelText : undefined
    const text = modelText ? modelText(output) : typeof output === 'string' ? output : JSON.stringify(output)
    const capped = capForModel(text, this.#options.toolOutputLimit ?? 4096)
    await updateToolCall(tx, call.id, {
      status,
      output,
      modelOutput: capped.text,
      modelTruncated: capped.truncated,
      ...(extra.dispatchId !== undefined && { dispatchId: extra.dispatchId }),
      ...(extra.repeatOf !== undefined && { repeatOf: extra.repeatOf }),
    })
    await insertToolMessage(tx, run, call.id, capped.text)
    this.#options.observer?.toolCall?.({ status })
    const started = this.#callStarts.get(call.id)
    this.#callStarts.delete(call.id)
    await appendEvents(tx, [
      runEvent(run, 'tool_call.completed', {
        callId: call.id,
        status,
        output,
        modelTruncated: capped.truncated,
        durationMs: started === undefined ? null : Math.round(performance.now() - started),
        ...(extra.repeatOf && { repeatOf: extra.repeatOf }),
      }),
    ])
  }

  async #requireAction(runId: string): Promise<void> {
    const { store } = this.#options
    await store.transaction(async (tx) => {
      const run = await lockRun(tx, runId)
      if (!run || run.status !== 'running') return
      const requiredAction = await this.#requiredAction(tx, runId)
      const updated = await updateRun(tx, runId, { status: 'requires_action', phase: null, requiredAction, lease: null })
      await appendEvents(tx, [runEvent(updated, 'run.status', { runId, status: updated.status, phase: null, requiredAction })])
    })
  }

  async #requiredAction(db: Executor, runId: string): Promise<JsonValue> {
    const calls = await listToolCalls(db, runId)
    return {
      decisions: calls
        .filter((call) => call.status === 'awaiting_decision')
        .map((call) => ({ decisionId: call.decisionId, callId: call.id, commandId: call.commandId, name: call.name, args: call.args, risk: call.risk })),
      toolOutputs: calls.filter((call) => call.status === 'awaiting_output').map((call) => ({ callId: call.id, name: call.name, args: call.args })),
    }
  }

  /** A decision about one of a run's calls: record its result, and continue once nothing is awaited. */
  async #onDecision(decision: DecisionView, outcome: DispatchOutcome | null): Promise<void> {
    const { store } = this.#options
    const runId = decision.runId!
    await store.transaction(async (tx) => {
      const run = await lockRun(tx, runId)
      if (!run) return
      const call = (await listToolCalls(tx, runId)).find((candidate) => candidate.decisionId === decision.id)
      if (!call || call.status !== 'awaiting_decision') return
      if (decision.status === 'expired' || !outcome) {
        await this.#finishCall(tx, run, call, 'expired', { accepted: false, expired: true })
      } else if (decision.status === 'rejected') {
        await this.#finishCall(tx, run, call, 'rejected', { accepted: false, rejected: true })
      } else {
        await this.#applyOutcome(tx, run, call, outcome)
      }
      if (run.status === 'requires_action') {
        const requiredAction = await this.#requiredAction(tx, runId)
        const updated = await updateRun(tx, runId, { requiredAction })
        await appendEvents(tx, [runEvent(updated, 'run.status', { runId, status: updated.status, phase: null, requiredAction })])
      }
    })
    await this.#resumeIfAnswered(runId)
  }

  async #resumeIfAnswered(runId: string): Promise<void> {
    const { store } = this.#options
    const resumed = await store.transaction(async (tx) => {
      const run = await lockRun(tx, runId)
      if (!run || run.status !== 'requires_action') return undefined
      const open = (await listToolCalls(tx, runId)).filter((call) => call.status === 'awaiting_decision' || call.status === 'awaiting_output' || call.status === 'pending')
      if (open.length > 0) return undefined
      const updated = await updateRun(tx, runId, { status: 'running', phase: 'tool_done', requiredAction: null, lease: this.#lease() })
      await appendEvents(tx, [runEvent(updated, 'run.status', { runId, status: updated.status, phase: updated.phase })])
      return updated
    })
    if (resumed && !this.#controllers.has(runId)) this.#spawn(runId)
  }

  async #endAborted(run: Run, signal: AbortSignal, messageId: string | null, text: string): Promise<void> {
    const reason = String(signal.reason ?? 'cancelled')
    if (messageId) {
      await this.#options.store.transaction(async (tx) => {
        await completeAssistantMessage(tx, messageId, text, null, 'cancelled')
        await appendEvents(tx, [runEvent(run, 'message.completed', { messageId, content: text, toolCalls: null, status: 'cancelled' })])
      })
    }
    if (reason === 'shutdown') {
      await this.#end(run.id, { status: 'failed', error: { code: 'interrupted', message: 'the server shut down during the run' }, openCalls: 'interrupted' })
    } else {
      // A superseded run's open calls expire (SPEC §6.1); a cancelled one's are cancelled.
      await this.#end(run.id, { status: 'cancelled', reason, openCalls: reason === 'superseded' ? 'expired' : 'cancelled' })
    }
  }

  /**
   * Ends a run: every open call gets its terminal result, pending decisions expire, the run's
   * terminal state and event are written — all before anything else happens in the conversation.
   */
  async #end(runId: string, end: RunEnd): Promise<void> {
    const decisions = await this.#options.store.transaction((tx) => this.#endIn(tx, runId, end))
    await this.#expireDecisions(decisions)
  }

  /** Decisions of an ended run can no longer be answered. */
  async #expireDecisions(decisionIds: string[]): Promise<void> {
    for (const decisionId of decisionIds) await this.#options.bus.expireDecision(decisionId).catch(() => undefined)
  }

  /** `#end` inside the caller's transaction; returns the decisions to expire once it commits. */
  async #endIn(tx: Executor, runId: string, end: RunEnd): Promise<string[]> {
    const decisions: string[] = []
    const run = await lockRun(tx, runId)
    if (!run || terminalRunStatuses.includes(run.status)) return decisions
    for (const call of await listToolCalls(tx, runId)) {
      if (!['pending', 'running', 'awaiting_decision', 'awaiting_output'].includes(call.status)) continue
      if (call.decisionId) decisions.push(call.decisionId)
      const status = end.openCalls ?? 'cancelled'
      const code = status === 'error' ? String(end.error?.code ?? 'error') : status
      const output: JsonValue =
        call.kind === 'client' ? { accepted: false, [code]: true } : { error: { code, message: `the run ended (${end.reason ?? (status === 'error' ? code : end.status)}) before this call finished` } }
      await this.#finishCall(tx, run, call, status, output)
    }
    // A turn that was streaming when the run ended (a crash) is closed, not left streaming.
    await closeStreamingMessages(tx, runId, end.status === 'cancelled' ? 'cancelled' : 'interrupted')
    const updated = await updateRun(tx, runId, {
      status: end.status,
      phase: null,
      requiredAction: null,
      ended: true,
      lease: null,
      ...(end.error && { error: end.error }),
      ...(end.reason && { cancelReason: end.reason }),
      ...(end.usage && { usage: end.usage }),
    })
    const terminal =
      end.status === 'completed'
        ? runEvent(updated, 'run.completed', { runId, usage: updated.usage })
        : end.status === 'failed'
          ? runEvent(updated, 'run.failed', { runId, error: updated.error })
          : end.status === 'cancelled'
            ? runEvent(updated, 'run.cancelled', { runId, reason: end.reason ?? 'cancelled' })
            : runEvent(updated, 'run.expired', { runId })
    await appendEvents(tx, [runEvent(updated, 'run.status', { runId, status: updated.status, phase: null }), terminal])
    this.#options.observer?.runEnded?.({ status: end.status, durationMs: updated.startedAt ? Date.now() - Date.parse(updated.startedAt) : null })
    return decisions
  }

  /** The model's tools: exposed commands (the project's subset, when it sets one) plus the run's client tools. */
  #toolTable(run: Run): Map<string, ToolEntry> {
    const table = new Map<string, ToolEntry>()
    const allowed = run.profile.tools === null ? null : new Set(run.profile.tools)
    for (const command of this.#options.bus.catalog.list()) {
      if (!command.toolName) continue
      if (allowed && !allowed.has(command.spec.id)) continue
      if (command.spec.entrances && !command.spec.entrances.includes('agent')) continue
      // Providers get a projection; the command's own schema is still enforced on dispatch.
      const projected = projectToolSchema(command.spec.paramsSchema)
      const description = projected.descriptionSuffix ? `${command.spec.description}\n\n${projected.descriptionSuffix}` : command.spec.description
      table.set(command.toolName, { kind: 'command', command, tool: { name: command.toolName, description, parameters: projected.parameters } })
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

  #lease(): { owner: string; expiresAt: Date } {
    return { owner: this.#instanceId, expiresAt: new Date(Date.now() + (this.#options.leaseMs ?? 30_000)) }
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
