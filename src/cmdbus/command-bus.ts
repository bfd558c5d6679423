import type { Actor, CommandContext, PluginLogger, ProjectRef, Risk } from '../extension/index.js'
import {
  activeUserIds,
  announceDecidedCallStarted,
  findAllowance,
  findDispatchByKey,
  getDecision,
  getDispatch,
  hasRejectedCall,
  insertDecision,
  KeyTaken,
  newId,
  pendingConnectDecisions,
  runEndedSignal,
  type Conversation,
  type DecisionRecord,
  type DecisionStatus,
  type Page,
  type PageRequest,
  type Project,
  type DispatchRecord,
  type Executor,
  type Store,
} from '../store/index.js'
import { initialEnvelope, recordStep, type AuditEnvelope, type DecisionSummary } from './audit-envelope.js'
import { DecisionFeed, type DecisionListener } from './decision-feed.js'
import { Decisions } from './decisions.js'
import { RunSettlement } from './run-settlement.js'
import type { CallLedger } from './call-ledger.js'
import { DispatchRecorder, type StartChange } from './dispatch-recorder.js'
import { DispatchExecutors } from './dispatch-executors.js'
import { runHandler } from './handler-runner.js'
import {
  appendDecisionEvent,
  fail,
  hashParams,
  hashRequest,
  outcomeOf,
  staticRisk,
  toDecisionView,
  validateParams,
} from './outcomes.js'
import type {
  BusError,
  DecideOutcome,
  DecisionAnswer,
  DecisionAnswerDetail,
  DecisionView,
  DispatchOutcome,
  DispatchRequest,
} from './bus-types.js'
import { alwaysAsks, type CommandCatalog, type RegisteredCommand } from './command-catalog.js'
import { evaluateGate, type PermissionMode } from './gate.js'
import { createPluginKv } from './plugin-kv.js'
import type { ProjectAccess } from './project-access.js'
import { redact } from './redact.js'
import { classifyCommandLine, type CommandLineRisk, type MatchedRule } from './risk-rules.js'

export interface CommandBusOptions {
  store: Store
  catalog: CommandCatalog
  access: ProjectAccess
  logger: (plugin: string) => PluginLogger
  /** How long a pending decision waits (PLINTH_ACTION_TTL). */
  actionTtlMs: number
  /** How long an `approve_session` allowance lasts (PLINTH_ALLOWANCE_TTL). */
  allowanceTtlMs: number
  /** How long a running dispatch's executor lease lasts between renewals (default 30 s). */
  dispatchLeaseMs?: number
  /** Operator high-risk keywords for command strings (PLINTH_HIGH_RISK_KEYWORDS). */
  highRiskKeywords?: readonly string[]
  /**
   * Largest result a handler may return, as JSON bytes (PLINTH_RESULT_MAX_BYTES, default 1 MiB): a
   * result is kept with the dispatch, the run's ledger and its event, so it must be bounded.
   */
  maxResultBytes?: number
}

/**
 * The one dispatch path for every effect (docs/architecture.md#the-command-bus): resolve → validate →
 * authorize → risk → gate → execute, each step recorded in the dispatch's audit envelope. Expected
 * outcomes are values.
 */
export class CommandBus {
  readonly #options: CommandBusOptions
  readonly #feed = new DecisionFeed()
  readonly #executors: DispatchExecutors
  readonly #decisions: Decisions
  readonly #runs = new RunSettlement()

  constructor(options: CommandBusOptions) {
    this.#options = options
    this.#executors = new DispatchExecutors(options.store, options.logger('plinth'), options.dispatchLeaseMs)
    this.#decisions = new Decisions({
      store: options.store,
      access: options.access,
      allowanceTtlMs: options.allowanceTtlMs,
      catalog: options.catalog,
      runs: this.#runs,
      feed: this.#feed,
    })
  }

  /**
   * Ends dispatches a stopped process left running (see DispatchExecutors.sweep). One a human had
   * approved is awaited by its run: the interrupted outcome goes to the run's ledger in the same
   * transaction, and the run continues (listeners are told, as after any decision).
   */
  async sweepOrphanedDispatches(options: { all: boolean }): Promise<number> {
    const decided = new Map<string, DecisionRecord>()
    const ended = await this.#executors.sweep(options, {
      settle: async (tx, orphan, outcome) => {
        if (!orphan.decisionId || !orphan.runId) return
        const decision = await getDecision(tx, orphan.decisionId)
        if (!decision) return
        await this.#runs.settle(tx, decision, outcome)
        decided.set(orphan.id, decision)
      },
    })
    for (const orphan of ended) {
      const decision = decided.get(orphan.id)
      if (!decision) continue
      const outcome: DispatchOutcome = {
        status: 'failed',
        dispatchId: orphan.id,
        error: { code: 'interrupted', message: 'the server stopped while the command ran' },
      }
      this.#feed.notify(toDecisionView(decision), outcome)
    }
    return ended.length
  }

  /** Whether a user may change things in a project (write commands are offered to their runs only then). */
  /** Whether the user may still see the conversation (its project shared with them, or theirs). */
  async maySee(userId: string, conversationId: string): Promise<boolean> {
    return (await this.#options.access.conversationInProject(userId, conversationId)) !== undefined
  }

  async mayWrite(userId: string, projectId: string): Promise<boolean> {
    return (await this.#options.access.project(userId, projectId, 'write')) !== undefined
  }

  /**
   * The risk the gate will see for a call before it is dispatched (a classifier evaluated on these
   * params), so clients are shown `low|medium|high`, never how it is decided. Null when the command is
   * unknown or the params are invalid (the dispatch refuses those without a decision).
   */
  async assessRisk(
    request: Pick<
      DispatchRequest,
      'commandId' | 'params' | 'entrance' | 'actor' | 'projectId' | 'conversationId' | 'runId'
    >,
  ): Promise<Risk | null> {
    await this.#options.catalog.settled()
    const command = this.#options.catalog.get(request.commandId)
    if (!command || validateParams(command, request.params)) return null
    if (request.entrance === 'agent' && command.spec.exposeAsTool?.risk) return command.spec.exposeAsTool.risk
    if (typeof command.spec.risk === 'string') return command.spec.risk
    const found = request.projectId
      ? await this.#options.access.project(request.actor.onBehalfOf, request.projectId, 'read')
      : undefined
    const project = found ? { id: found.id, ownerId: found.ownerId, name: found.name } : null
    const dispatch = {
      id: null,
      callId: null,
      conversationId: request.conversationId ?? null,
      runId: request.runId ?? null,
      entrance: request.entrance,
    }
    try {
      return this.#risk(
        command,
        request as DispatchRequest,
        this.#context(command, request.actor, dispatch, project, undefined),
      )
    } catch {
      return 'high' // a classifier that fails refuses the dispatch; until then, assume the worst
    }
  }

  /** The high-risk rules (built in, plus the operator's keywords) applied to a command string. */
  classifyCommandLine(text: string): CommandLineRisk {
    return classifyCommandLine(text, this.#options.highRiskKeywords ?? [])
  }

  /** The high-risk rules a call of `commandId` with these params matches (core.exec's shell line), if any. */
  matchedRules(commandId: string, params: Parameters<NonNullable<RegisteredCommand['rulesWhen']>>[0]): MatchedRule[] {
    return this.#options.catalog.get(commandId)?.rulesWhen?.(params) ?? []
  }

  get catalog(): CommandCatalog {
    return this.#options.catalog
  }

  /** The run manager's ledger, through which decided calls are settled into their runs (see RunSettlement). */
  bindRuns(ledger: CallLedger | null): void {
    this.#runs.bind(ledger)
  }

  onDecisionResolved(listener: DecisionListener): () => void {
    return this.#feed.subscribe(listener)
  }

  async dispatch(request: DispatchRequest): Promise<DispatchOutcome> {
    const { store, catalog } = this.#options
    // 1. resolve (mounted MCP servers are started when first needed)
    await catalog.settled()
    const command = catalog.get(request.commandId)
    if (!command) return fail(null, 'unknown_command', `no command ${request.commandId}`)
    if (command.spec.entrances && !command.spec.entrances.includes(request.entrance)) {
      return fail(
        null,
        'entrance_not_allowed',
        `${command.spec.id} cannot be dispatched from the ${request.entrance} entrance`,
      )
    }
    const ownerId = request.actor.onBehalfOf
    const paramsHash = hashParams(request.params)
    const requestHash = hashRequest(command.spec.id, paramsHash, request)
    // Idempotency: a repeat returns the first outcome.
    if (request.idempotencyKey && !request.fresh) {
      const previous = await findDispatchByKey(store, ownerId, request.idempotencyKey)
      if (previous) return this.#replay(previous, command.spec.id, paramsHash, requestHash)
    }
    // Authorized before anything about the target is resolved or recorded: a conversation or project
    // the caller may not see answers not_found, and the attempt is recorded without its ids, so the
    // caller learns nothing (not even the project of the conversation) and its owner's audit lists
    // nothing of the caller's.
    const scope = await this.#authorize(
      command,
      {
        ownerId,
        projectId: request.projectId ?? null,
        conversationId: request.conversationId ?? null,
        params: request.params,
      },
      request.known,
    )
    const unseen = 'error' in scope && scope.error.code === 'not_found'
    const projectId = unseen ? null : (scope.project?.id ?? null)
    const now = new Date().toISOString()
    const dispatch: DispatchRecord = {
      id: newId(),
      commandId: command.spec.id,
      plugin: command.plugin,
      pluginVersion: command.pluginVersion,
      entrance: request.entrance,
      actor: request.actor,
      ownerId,
      projectId,
      conversationId: unseen ? null : (request.conversationId ?? null),
      runId: request.runId ?? null,
      callId: request.callId ?? null,
      idempotencyKey: request.idempotencyKey ?? null,
      params: request.params,
      paramsHash,
      requestHash,
      risk: staticRisk(command),
      status: 'requested',
      decisionId: null,
      result: null,
      error: null,
      createdAt: now,
      updatedAt: now,
    }
    const recorder = new DispatchRecorder(
      store,
      dispatch,
      initialEnvelope(dispatch, command.spec.paramsSchema, command.origin),
      { hooks: request.driven },
    )
    try {
      return await this.#pipeline(request, command, scope, recorder)
    } catch (error) {
      if (!(error instanceof KeyTaken)) throw error
      // A concurrent request with the same key got there first.
      const previous = await findDispatchByKey(store, ownerId, request.idempotencyKey ?? '')
      return previous
        ? this.#replay(previous, command.spec.id, paramsHash, requestHash)
        : fail(null, 'dispatch_in_progress', 'a dispatch with this idempotency key is in progress')
    }
  }

  /** Steps 2–6 of a dispatch, each recorded by `recorder`. */
  async #pipeline(
    request: DispatchRequest,
    command: RegisteredCommand,
    scope: Scope | Refusal,
    recorder: DispatchRecorder,
  ): Promise<DispatchOutcome> {
    const { store } = this.#options
    const { dispatch } = recorder
    const ownerId = dispatch.ownerId
    const finish = (status: 'failed' | 'rejected', error: BusError) => recorder.refuse(status, error)

    // 2. validate
    const invalid = validateParams(command, request.params)
    if (invalid) return finish('failed', invalid)
    // 3. authorize (decided before the dispatch was built)
    if ('error' in scope) return finish('failed', scope.error)
    // What can only fail is refused now, not after a person approved it.
    if (command.needsConversation && !scope.conversation)
      return finish('failed', {
        code: 'conversation_required',
        message: `${command.spec.id} works in a conversation's work directory: dispatch it with a conversationId`,
        core: true,
      })
    const refused = command.precheck?.(request.params)
    if (refused) return finish('failed', { ...refused, core: true } as BusError)
    const context = this.#context(command, request.actor, dispatch, scope.project, request.signal)
    // 4. risk
    let risk: Risk
    try {
      risk = this.#risk(command, request, context)
    } catch (error) {
      return finish('failed', {
        code: 'command_failed',
        message: `risk classifier failed: ${(error as Error).message}`,
      })
    }
    // 5. gate (a session allowance is looked up only when it could change the answer)
    const gateInput = {
      risk,
      confirm: alwaysAsks(command, request.params),
      mode: (scope.conversation?.permissionMode ?? 'manual') as PermissionMode,
      hasAllowance: false,
      approvalPolicy: request.approvalPolicy ?? 'ask',
    }
    let gate = evaluateGate(gateInput)
    if (
      gate.via === 'risk' &&
      risk === 'medium' &&
      gateInput.mode === 'risky' &&
      request.entrance === 'agent' &&
      dispatch.runId &&
      scope.conversation &&
      (await hasRejectedCall(store, dispatch.runId))
    )
      gate = evaluateGate({ ...gateInput, rejectedInRun: true })
    const allowance =
      gate.decision !== 'allow' && scope.conversation
        ? await findAllowance(store, scope.conversation.id, command.spec.id, dispatch.paramsHash)
        : undefined
    if (allowance) gate = evaluateGate({ ...gateInput, hasAllowance: true })
    // Whoever is asked reads which high-risk rules the call matched (SPEC: a match names its rule).
    const rules = gate.decision === 'allow' ? [] : (command.rulesWhen?.(request.params) ?? [])
    if (rules.length > 0)
      gate = {
        ...gate,
        reasons: [
          ...gate.reasons,
          ...rules.map((rule) => `matches the high-risk rule ${rule.id}: ${rule.description}`),
        ],
      }
    // The model calls an MCP server that acts with each user's own account, and this user has not
    // connected theirs: the run waits for them to connect (a `connect` decision; docs/mcp.md). Human
    // entrances are told at once by the command's own error.
    const needsAccount =
      request.entrance === 'agent' && command.connectionWhen && gate.decision !== 'deny'
        ? await command.connectionWhen(ownerId)
        : null
    // Connecting approves only a call that needed nothing else; one that needs a person's approval
    // anyway stays an approval, told to connect first.
    const connect = needsAccount && gate.decision === 'allow' ? needsAccount : null
    if (needsAccount)
      gate = {
        decision: 'ask',
        reasons: connect ? [connect] : [...gate.reasons, needsAccount.replace(' (connecting approves this call)', '')],
      }
    if (gate.decision === 'deny') {
      await recorder.record('gated', { status: 'requested', risk })
      return finish('rejected', {
        code: 'denied',
        message: 'denied: this call needs a human confirmation and approvalPolicy is dontAsk',
        reasons: gate.reasons,
      })
    }
    if (gate.decision === 'ask') {
      let preview: string | null = null
      try {
        preview = command.spec.preview ? await command.spec.preview(request.params, context) : null
      } catch (error) {
        preview = `(preview failed: ${(error as Error).message})`
      }
      // Designated approvers (a second person), as user ids; none that exist means none may approve.
      const named = command.approversWhen?.() ?? null
      const approvers = named && named.length > 0 ? await activeUserIds(store, named) : null
      const decision = await recorder.step(async (tx) => {
        const created: DecisionRecord = await insertDecision(tx, {
          approvers: approvers?.filter((id) => id !== ownerId) ?? null,
          ...(connect && { kind: 'connect' as const }),
          id: newId(),
          dispatchId: dispatch.id,
          ownerId,
          projectId: dispatch.projectId,
          conversationId: dispatch.conversationId,
          runId: dispatch.runId,
          callId: dispatch.callId,
          commandId: command.spec.id,
          params: redact(request.params, command.spec.paramsSchema),
          preview,
          risk,
          reasons: gate.reasons,
          expiresAt: new Date(Date.now() + this.#options.actionTtlMs).toISOString(),
        })
        recorder.advance(
          await recordStep(tx, 'awaiting_decision', recorder.envelope, dispatch, {
            status: 'awaiting_decision',
            risk,
            decision: { id: created.id, outcome: 'pending', by: null, scope: null, via: null },
          }),
        )
        await appendDecisionEvent(tx, 'decision.required', created, {
          decisionId: created.id,
          runId: created.runId,
          callId: created.callId,
          commandId: created.commandId,
          params: created.params,
          preview: created.preview,
          risk: created.risk,
          reasons: created.reasons,
          expiresAt: created.expiresAt,
        })
        await request.driven?.settled(tx, {
          status: 'awaiting_decision',
          dispatchId: dispatch.id,
          decision: toDecisionView(created),
        })
        return created
      })
      return { status: 'awaiting_decision', dispatchId: dispatch.id, decision: toDecisionView(decision) }
    }
    const summary: DecisionSummary = {
      id: allowance?.decisionId ?? null,
      outcome: 'approved',
      by: null,
      scope: allowance ? 'session' : null,
      via: gate.via ?? 'risk',
    }
    // 6. execute
    return this.#execute(command, recorder, context, { risk, decision: summary })
  }

  /** Decisions the user may answer, newest first (overdue ones expired first). */
  listDecisions(
    userId: string,
    filter: { status?: DecisionStatus; conversationId?: string },
    page: PageRequest,
  ): Promise<Page<DecisionView>> {
    return this.#decisions.list(userId, filter, page)
  }

  /** Pending decisions that now need a designated approver (after a switch to `direct`) are reserved to them. */
  reserveForApprovers(): Promise<number> {
    return this.#decisions.reserveForApprovers()
  }

  /** One decision the user may act on (expired first when overdue), or undefined. */
  getDecision(decisionId: string, userId: string): Promise<DecisionView | undefined> {
    return this.#decisions.get(decisionId, userId)
  }

  /**
   * Answers a pending decision (docs/guides/commands-and-decisions.md). The command runs at most once,
   * whoever answers how often.
   */
  async decide(
    decisionId: string,
    userId: string,
    answer: DecisionAnswer,
    note?: string,
    detail: DecisionAnswerDetail = {},
  ): Promise<DecideOutcome> {
    const answered = await this.#decisions.decide(decisionId, userId, answer, note, detail)
    if (!('approved' in answered)) return answered
    const { decision, dispatch, envelope, summary } = answered.approved
    const outcome = await this.#runApproved(decision, dispatch, envelope, summary)
    const view = toDecisionView(decision)
    this.#feed.notify(view, outcome)
    return { ok: true, decision: view, dispatch: outcome }
  }

  /**
   * The user connected their account to an MCP server: their calls waiting for that (`connect`
   * decisions on commands under `prefix`) are approved, so the runs go on. Returns how many.
   */
  async approveConnected(userId: string, prefix: string): Promise<number> {
    let approved = 0
    for (const id of await pendingConnectDecisions(this.#options.store, userId, prefix)) {
      try {
        const outcome = await this.decide(id, userId, 'approve', 'account connected')
        if (outcome.ok) approved++
      } catch (error) {
        this.#options
          .logger('mcp')
          .warn('a waiting call could not be approved after its account was connected', { decisionId: id, err: error })
      }
    }
    return approved
  }

  /**
   * A dispatch's outcome once it has one (succeeded, failed, rejected, expired, cancelled); null while
   * it is requested, awaiting a decision or running; undefined when there is no such dispatch.
   */
  async dispatchOutcome(dispatchId: string): Promise<DispatchOutcome | null | undefined> {
    const dispatch = await getDispatch(this.#options.store, dispatchId)
    if (!dispatch) return undefined
    return dispatch.status === 'requested' || dispatch.status === 'awaiting_decision' || dispatch.status === 'running'
      ? null
      : outcomeOf(dispatch)
  }

  /**
   * What the user dispatched with an idempotency key, if anything: for a route that must find its
   * target before dispatching, when a retry's target is already gone (a memory forgotten).
   */
  async dispatchedWithKey(
    userId: string,
    key: string,
  ): Promise<{ commandId: string; params: unknown; projectId: string | null } | undefined> {
    const found = await findDispatchByKey(this.#options.store, userId, key)
    return found && { commandId: found.commandId, params: found.params, projectId: found.projectId }
  }

  /** Whether the user may approve the decision (not only reject it): it may be reserved to designated approvers. */
  async mayApprove(decisionId: string, userId: string): Promise<boolean> {
    const decision = await getDecision(this.#options.store, decisionId)
    return (
      decision !== undefined &&
      (await this.#decisions.canAct(userId, decision)) &&
      (!decision.approvers || decision.approvers.includes(userId))
    )
  }

  /** Marks a pending decision expired (also used when a run is superseded or times out). */
  expireDecision(decisionId: string): Promise<DecisionView | undefined> {
    return this.#decisions.expireDecision(decisionId)
  }

  /** Decisions a run's end expired in its own transaction (`CallLedger.end`), now committed: listeners are told. */
  decisionsExpired(decisions: readonly DecisionRecord[]): void {
    for (const decision of decisions) this.#feed.notify(toDecisionView(decision), null)
  }

  /** Expires every pending decision past its deadline. */
  expireOverdue(): Promise<number> {
    return this.#decisions.expireOverdue()
  }

  /** Whether a user may see and answer a decision: it is on their behalf, or in a project they own. */
  canAct(userId: string, decision: DecisionRecord): Promise<boolean> {
    return this.#decisions.canAct(userId, decision)
  }

  async #runApproved(
    decision: DecisionRecord,
    dispatch: DispatchRecord,
    envelope: AuditEnvelope,
    summary: DecisionSummary,
  ): Promise<DispatchOutcome> {
    const command = this.#options.catalog.get(dispatch.commandId)
    // Every transaction locks the decision's run first; the outcome goes to the run's ledger in the
    // transaction that records it.
    const recorder = new DispatchRecorder(this.#options.store, dispatch, envelope, {
      persisted: true,
      hooks: this.#runs.approved(decision),
    })
    const fail = (error: BusError) => recorder.refuse('failed', error)
    if (!command)
      return fail({ code: 'unknown_command', message: `command ${dispatch.commandId} is no longer registered` })
    // Approval does not bypass the rules: validate again and re-authorize the original actor.
    const invalid = validateParams(command, dispatch.params)
    if (invalid) return fail(invalid)
    const scope = await this.#authorize(command, dispatch)
    if ('error' in scope) return fail(scope.error)
    // Cancelling the run reaches the handler, as it would have without the wait for a human.
    const runEnded = dispatch.runId ? runEndedSignal(this.#options.store, dispatch.runId) : undefined
    try {
      const context = this.#context(command, dispatch.actor, dispatch, scope.project, runEnded?.signal)
      // The only step before the handler is `running`: the run's call starts with it, not before the decision.
      return await this.#execute(
        command,
        recorder,
        context,
        { risk: dispatch.risk as Risk, decision: summary },
        (tx) => (decision.runId ? announceDecidedCallStarted(tx, decision.runId, decision.id) : Promise.resolve()),
      )
    } finally {
      runEnded?.stop()
    }
  }

  async #execute(
    command: RegisteredCommand,
    recorder: DispatchRecorder,
    context: CommandContext & { abort: AbortController },
    gate: { risk: Risk; decision: DecisionSummary },
    announce?: (tx: Executor) => Promise<void>,
  ): Promise<DispatchOutcome> {
    const change: StartChange = {
      status: 'running',
      risk: gate.risk,
      decision: gate.decision,
      startedAt: new Date().toISOString(),
      executor: this.#executors.claim(),
    }
    const current = await recorder.start(change, announce)
    this.#executors.started()
    try {
      return await runHandler(
        { store: this.#options.store, maxResultBytes: this.#options.maxResultBytes },
        command,
        recorder.dispatch,
        current,
        context,
        recorder.hooks,
      )
    } finally {
      this.#executors.finished()
    }
  }

  /** Checks the conversation and project a dispatch names, and the command's resource authorizer. */
  async #authorize(
    command: RegisteredCommand,
    dispatch: Pick<DispatchRecord, 'ownerId' | 'projectId' | 'conversationId' | 'params'>,
    read?: DispatchRequest['known'],
  ): Promise<Scope | Refusal> {
    const { access, catalog } = this.#options
    const userId = dispatch.ownerId
    let conversation: Conversation | null = null
    let known: Project | undefined
    let projectId = dispatch.projectId
    if (dispatch.conversationId) {
      const found = await access.conversationInProject(userId, dispatch.conversationId, read)
      if (!found) return { error: { code: 'not_found', message: 'conversation not found' } }
      conversation = found.conversation
      known = found.project
      if (projectId && projectId !== conversation.projectId)
        return { error: { code: 'not_found', message: 'project not found' } }
      projectId = conversation.projectId
    }
    let project: ProjectRef | null = null
    if (projectId) {
      const action = command.spec.idempotent ? 'read' : 'write'
      const found = await access.project(userId, projectId, action, known)
      if (!found) {
        // A project the actor sees but may not write in is forbidden, not missing (as on every route).
        const seen = action === 'write' && (await access.project(userId, projectId, 'read', known))
        return seen
          ? { error: { code: 'forbidden', message: 'not allowed to write in this project' } }
          : { error: { code: 'not_found', message: 'project not found' } }
      }
      project = { id: found.id, ownerId: found.ownerId, name: found.name }
    }
    if (command.spec.resource) {
      const authorizer = catalog.authorizer(command.spec.resource.kind)
      let allowed = false
      try {
        allowed = authorizer
          ? await authorizer(userId, command.spec.resource.id(dispatch.params), { projectId: project?.id ?? null })
          : false
      } catch {
        allowed = false
      }
      if (!allowed)
        return {
          error: { code: 'forbidden', message: `not allowed to use this ${command.spec.resource.kind}` },
          project,
        }
    }
    return { project, conversation }
  }

  #risk(command: RegisteredCommand, request: DispatchRequest, context: CommandContext): Risk {
    if (request.entrance === 'agent' && command.spec.exposeAsTool?.risk) return command.spec.exposeAsTool.risk
    const risk =
      typeof command.spec.risk === 'function' ? command.spec.risk(request.params, context) : command.spec.risk
    return risk === 'low' || risk === 'medium' || risk === 'high' ? risk : 'high'
  }

  #context(
    command: RegisteredCommand,
    actor: Actor,
    dispatch: Pick<DispatchRecord, 'entrance' | 'conversationId' | 'runId'> & {
      id: string | null
      callId: string | null
    },
    project: ProjectRef | null,
    signal: AbortSignal | undefined,
  ): CommandContext & { abort: AbortController } {
    const abort = new AbortController()
    // AbortSignal.any holds the caller's (long-lived) run signal weakly: no listener piles up per dispatch.
    const combined = signal ? AbortSignal.any([signal, abort.signal]) : abort.signal
    const context = {
      actor,
      entrance: dispatch.entrance as CommandContext['entrance'],
      project,
      conversationId: dispatch.conversationId,
      runId: dispatch.runId,
      signal: combined,
      abort,
      kv: createPluginKv(this.#options.store, command.plugin),
      log: this.#options.logger(command.plugin),
    }
    // Core commands read these (see CoreContext); they are not part of the plugin surface.
    Object.defineProperties(context, { dispatchId: { value: dispatch.id }, callId: { value: dispatch.callId } })
    return context
  }

  async #replay(
    previous: DispatchRecord,
    commandId: string,
    paramsHash: string,
    requestHash: string,
  ): Promise<DispatchOutcome> {
    const same =
      previous.requestHash !== null
        ? previous.requestHash === requestHash
        : previous.commandId === commandId && previous.paramsHash === paramsHash
    if (!same) {
      return fail(
        null,
        'idempotency_key_reused',
        'this idempotency key was used for a different command, params, entrance, project or conversation',
      )
    }
    if (previous.status === 'requested' || previous.status === 'running') {
      return fail(previous.id, 'dispatch_in_progress', 'the first dispatch with this key is still running')
    }
    if (previous.status === 'awaiting_decision' && previous.decisionId) {
      const decision = await getDecision(this.#options.store, previous.decisionId)
      if (decision)
        return {
          status: 'awaiting_decision',
          dispatchId: previous.id,
          decision: toDecisionView(decision),
          replayed: true,
        }
    }
    return { ...outcomeOf(previous), replayed: true }
  }
}

/** What a dispatch may touch, once authorized. */
interface Scope {
  project: ProjectRef | null
  conversation: Conversation | null
}

/** A refused dispatch; `project` when the caller may see it (refused by a resource authorizer). */
interface Refusal {
  error: BusError
  project?: ProjectRef | null
}
