import {
  activeUserIds,
  getDecision,
  getDispatch,
  insertAllowance,
  lastAuditEnvelope,
  listDecisions,
  lockRunOf,
  newId,
  overdueDecisionIds,
  replaceDispatchParams,
  reservePendingDecisions,
  resolveDecision,
  type DecisionRecord,
  type DecisionReply,
  type DecisionStatus,
  type DispatchRecord,
  type Page,
  type PageRequest,
  type Store,
} from '../store/index.js'
import { ownedProjectIds } from './audit-query.js'
import { initialEnvelope, recordStep, type AuditEnvelope, type DecisionSummary } from './audit-envelope.js'
import type { DecideOutcome, DecisionAnswer, DecisionAnswerDetail, DecisionView, Params } from './bus-types.js'
import { alwaysAsks, type CommandCatalog } from './command-catalog.js'
import {
  appendDecisionEvent,
  hashParams,
  outcomeOf,
  rejectedOutcome,
  toDecisionView,
  validateParams,
} from './outcomes.js'
import { redact } from './redact.js'
import { expirePendingDecision } from './decision-expiry.js'
import { defaultTimeoutMs } from './handler-runner.js'
import type { ProjectAccess } from './project-access.js'
import type { RunSettlement } from './run-settlement.js'
import type { DecisionFeed } from './decision-feed.js'

/** How long a repeated answer waits at most for the first answer's command to finish. */
const maxRepeatWaitMs = 10 * 60_000

/** Whether a dispatch has its outcome (neither waiting for a decision, nor about to run, nor running). */
const settled = (dispatch: DispatchRecord): boolean =>
  dispatch.status !== 'requested' && dispatch.status !== 'awaiting_decision' && dispatch.status !== 'running'

/** What answering and expiring decisions needs from the bus. */
export interface DecisionDeps {
  store: Store
  access: ProjectAccess
  /** How long an `approve_session` allowance lasts (PLINTH_ALLOWANCE_TTL). */
  allowanceTtlMs: number
  /** Whether a decision's command asks every time (then a session allowance could never apply). */
  catalog: CommandCatalog
  /** The runs behind decisions: an outcome goes to the run's ledger inside the caller's transaction. */
  runs: RunSettlement
  /** Who is told when a decision is resolved. */
  feed: DecisionFeed
}

/** An approved decision's dispatch, with its envelope and the decision's summary, ready to run. */
export interface ApprovedDispatch {
  decision: DecisionRecord
  dispatch: DispatchRecord
  envelope: AuditEnvelope
  summary: DecisionSummary
}

/**
 * Human-in-the-loop decisions (docs/guides/commands-and-decisions.md): answering one (once, whoever
 * answers how often), expiring those nobody answered, and who may act on them. Each change is recorded
 * on the dispatch's audit envelope and the run's ledger in the same transaction.
 */
export class Decisions {
  readonly #deps: DecisionDeps

  constructor(deps: DecisionDeps) {
    this.#deps = deps
  }

  /**
   * Decisions the user may answer (on their behalf, or in a project they own), newest first; those
   * past their deadline are expired first, so none is listed pending that could no longer be answered.
   */
  async list(
    userId: string,
    filter: { status?: DecisionStatus; conversationId?: string },
    page: PageRequest,
  ): Promise<Page<DecisionView>> {
    await this.expireOverdue()
    const { store } = this.#deps
    const found = await listDecisions(
      store,
      { userId, visibleProjectIds: await ownedProjectIds(store, userId), ...filter },
      page,
    )
    return { items: found.items.map((decision) => toDecisionView(decision)), nextCursor: found.nextCursor }
  }

  /** One decision the user may act on (expired first when overdue, as in `list`), or undefined. */
  async get(decisionId: string, userId: string): Promise<DecisionView | undefined> {
    const { store } = this.#deps
    let decision = await getDecision(store, decisionId)
    if (!decision || !(await this.canAct(userId, decision))) return undefined
    if (decision.status === 'pending' && Date.parse(decision.expiresAt) <= Date.now()) {
      await this.expireDecision(decision.id)
      decision = (await getDecision(store, decisionId)) ?? decision
    }
    return toDecisionView(decision)
  }

  /**
   * Answers a pending decision: the answer is recorded (once, whoever answers how often), and an
   * approval comes back as `approved` for the bus to run (validated and authorized again, then
   * executed) and then announce with its outcome.
   */
  async decide(
    decisionId: string,
    userId: string,
    answer: DecisionAnswer,
    note?: string,
    detail: DecisionAnswerDetail = {},
  ): Promise<DecideOutcome | { ok: true; approved: ApprovedDispatch }> {
    await this.#deps.catalog.settled()
    const { store } = this.#deps
    const current = await getDecision(store, decisionId)
    if (!current || !(await this.canAct(userId, current)))
      return { ok: false, error: { code: 'not_found', message: 'decision not found' } }
    // Neither rejecting nor answering in the call's place runs anything.
    const runs = answer !== 'reject' && answer !== 'respond'
    // A call reserved for designated approvers: only they approve it; whoever may act may still reject.
    // Reserved now too when it was not when asked (the backend switched to `direct` while it waited):
    // the approval would run it under today's rules.
    const approvers = current.approvers ?? (runs ? await this.#approversNow(current) : null)
    if (approvers && runs && !approvers.includes(userId)) {
      return {
        ok: false,
        error: {
          code: 'forbidden',
          message:
            'this execution on the server itself must be approved by an operator-designated approver (exec.directApprovers), not by the person who asked',
        },
      }
    }
    if (answer === 'approve_session' && current.status === 'pending' && !current.conversationId) {
      // An allowance lasts for a conversation: a call outside one has nothing it could apply to.
      return {
        ok: false,
        error: {
          code: 'scope_not_allowed',
          message: `this call of ${current.commandId} is outside a conversation, so approve_session could never apply: approve it once`,
        },
        decision: toDecisionView(current),
      }
    }
    if (answer === 'approve_session' && current.status === 'pending') {
      // A command that asks every time (e.g. an execution under direct) is never let through by an allowance.
      const command = this.#deps.catalog.get(current.commandId)
      const dispatch = command ? await getDispatch(store, current.dispatchId) : undefined
      if (command && dispatch && alwaysAsks(command, dispatch.params)) {
        return {
          ok: false,
          error: {
            code: 'scope_not_allowed',
            message: `${current.commandId} asks for confirmation every time, so approve_session could never apply: approve it once`,
          },
          decision: toDecisionView(current),
        }
      }
    }
    const reply = this.#reply(current, answer, detail)
    if ('error' in reply) return { ok: false, error: reply.error, decision: toDecisionView(current) }
    const command = this.#deps.catalog.get(current.commandId)
    if (current.status === 'pending' && Date.parse(current.expiresAt) <= Date.now()) {
      await this.expireDecision(current.id)
    }
    const wanted = runs ? 'approved' : 'rejected'
    const resolved = await store.transaction(async (tx) => {
      await lockRunOf(tx, current)
      const decision = await resolveDecision(tx, decisionId, {
        status: wanted,
        scope: answer === 'approve_session' ? 'session' : 'once',
        decidedBy: userId,
        ...(note !== undefined && { note }),
        ...(reply.reply && { reply: reply.reply }),
      })
      if (!decision) return undefined
      let dispatch = await getDispatch(tx, decision.dispatchId)
      if (!dispatch) throw new Error(`decision ${decision.id} has no dispatch`)
      let envelope = (await lastAuditEnvelope(tx, dispatch.id)) ?? initialEnvelope(dispatch, undefined)
      if (reply.reply?.kind === 'edit') {
        // The person's params are what runs (validated again with the approval), and what the audit shows.
        const params = reply.reply.params
        dispatch = await replaceDispatchParams(tx, dispatch.id, params, hashParams(params as Params))
        envelope = {
          ...envelope,
          params: redact(params, command?.spec.paramsSchema),
          paramsHash: dispatch.paramsHash,
        }
      }
      const summary: DecisionSummary = {
        id: decision.id,
        outcome: wanted,
        by: userId,
        scope: decision.scope,
        via: 'human',
        ...(reply.reply && { reply: reply.reply.kind }),
      }
      const next = await recordStep(tx, 'decided', envelope, dispatch, {
        status: wanted === 'approved' ? 'awaiting_decision' : 'rejected',
        decision: summary,
        ...(wanted === 'rejected' && {
          error:
            reply.reply?.kind === 'respond'
              ? { code: 'rejected', message: 'a person answered in its place', response: reply.reply.text }
              : { code: 'rejected', message: 'rejected by a human' },
          finishedAt: new Date().toISOString(),
        }),
      })
      if (answer === 'approve_session' && decision.conversationId) {
        await insertAllowance(tx, {
          id: newId(),
          conversationId: decision.conversationId,
          commandId: decision.commandId,
          paramsHash: dispatch.paramsHash,
          decisionId: decision.id,
          createdBy: userId,
          expiresAt: new Date(Date.now() + this.#deps.allowanceTtlMs).toISOString(),
        })
      }
      await appendDecisionEvent(tx, 'decision.resolved', decision, {
        decisionId: decision.id,
        outcome: wanted,
        by: userId,
        scope: decision.scope ?? 'once',
        ...(reply.reply && { reply: reply.reply.kind }),
      })
      if (wanted === 'rejected') await this.#deps.runs.settle(tx, decision, rejectedOutcome(dispatch.id))
      return { decision, dispatch, envelope: next, summary }
    })
    if (!resolved) {
      // Already answered (possibly by a racing request): same answer → its stored outcome.
      const decided = await getDecision(store, decisionId)
      if (!decided) return { ok: false, error: { code: 'not_found', message: 'decision not found' } }
      const view = toDecisionView(decided)
      if (decided.status === 'expired')
        return {
          ok: false,
          error: { code: 'decision_expired', message: 'the decision expired or was superseded' },
          decision: view,
        }
      if (decided.status !== wanted)
        return {
          ok: false,
          error: { code: 'decision_conflict', message: `the decision was already ${decided.status}` },
          decision: view,
        }
      // Approved once is not approved for the session (nor the other way round): a different answer.
      const wantedScope = answer === 'approve_session' ? 'session' : 'once'
      if (wanted === 'approved' && (decided.scope ?? 'once') !== wantedScope)
        return {
          ok: false,
          error: {
            code: 'decision_conflict',
            message: `the decision was already approved ${decided.scope === 'session' ? 'for the session' : 'once'}`,
          },
          decision: view,
        }
      // Edited with other params, answered with other text, or plainly after an edit: a different answer.
      if (!sameReply(decided.reply, reply.reply))
        return {
          ok: false,
          error: {
            code: 'decision_conflict',
            message: `the decision was already answered ${decided.reply ? `with ${decided.reply.kind === 'edit' ? 'other params' : 'another reply'}` : 'without a change'}`,
          },
          decision: view,
        }
      // The first answer's command may still be running (a client retrying after a timeout): its outcome.
      const dispatch = await this.#settled(decided)
      if (dispatch && !settled(dispatch))
        return {
          ok: false,
          error: { code: 'dispatch_in_progress', message: 'the approved command is still running: ask again later' },
          decision: view,
        }
      return {
        ok: true,
        decision: view,
        dispatch: dispatch
          ? outcomeOf(dispatch)
          : { status: 'failed', dispatchId: null, error: { code: 'not_found', message: 'dispatch missing' } },
      }
    }
    if (wanted === 'approved') return { ok: true, approved: resolved }
    const view = toDecisionView(resolved.decision)
    const outcome = rejectedOutcome(resolved.dispatch.id)
    this.#deps.feed.notify(view, outcome)
    return { ok: true, decision: view, dispatch: outcome }
  }

  /**
   * The decision's dispatch once it has an outcome, waiting while the approval's command runs (on any
   * instance) for as long as the command may take; as it is then, if it still has none.
   */
  async #settled(decision: DecisionRecord): Promise<DispatchRecord | undefined> {
    const { store, catalog } = this.#deps
    const limitMs = (catalog.get(decision.commandId)?.spec.timeoutMs ?? defaultTimeoutMs) + 5_000
    const deadline = Date.now() + Math.min(limitMs, maxRepeatWaitMs)
    for (let pause = 25; ; pause = Math.min(pause * 2, 500)) {
      const dispatch = await getDispatch(store, decision.dispatchId)
      if (!dispatch || settled(dispatch) || Date.now() >= deadline) return dispatch
      await new Promise((resolve) => setTimeout(resolve, pause))
    }
  }

  /** An `edit` or `respond` answer's reply, checked: edited params must pass the command's schema. */
  #reply(
    decision: DecisionRecord,
    answer: DecisionAnswer,
    detail: DecisionAnswerDetail,
  ): { reply?: DecisionReply } | { error: { code: 'validation_failed'; message: string } } {
    if (answer === 'respond') {
      const text = detail.text?.trim()
      if (!text)
        return { error: { code: 'validation_failed', message: 'body.text: respond needs the text to answer with' } }
      return { reply: { kind: 'respond', text } }
    }
    if (answer !== 'edit') return {}
    const params = detail.params
    if (params === null || typeof params !== 'object' || Array.isArray(params))
      return {
        error: { code: 'validation_failed', message: 'body.params: edit needs the params to run with (an object)' },
      }
    const command = this.#deps.catalog.get(decision.commandId)
    if (!command)
      return { error: { code: 'validation_failed', message: `command ${decision.commandId} is no longer registered` } }
    const invalid = validateParams(command, params as Params)
    if (invalid) return { error: { code: 'validation_failed', message: `body.params: ${invalid.message}` } }
    return { reply: { kind: 'edit', params } }
  }

  /** Marks a pending decision expired (also used when a run is superseded or times out). */
  async expireDecision(decisionId: string): Promise<DecisionView | undefined> {
    const { store } = this.#deps
    const pending = await getDecision(store, decisionId)
    if (!pending || pending.status !== 'pending') return undefined
    const expired = await store.transaction(async (tx) => {
      await lockRunOf(tx, pending)
      const decision = await expirePendingDecision(tx, decisionId)
      if (!decision) return undefined
      // Ending its run may expire the run's other pending decisions, in this transaction too.
      const others = await this.#deps.runs.settle(tx, decision, null)
      return { decision, others }
    })
    if (!expired) return undefined
    const view = toDecisionView(expired.decision)
    this.#deps.feed.notify(view, null)
    for (const other of expired.others) this.#deps.feed.notify(toDecisionView(other), null)
    return view
  }

  /** Expires every pending decision past its deadline. */
  async expireOverdue(): Promise<number> {
    const overdue = await overdueDecisionIds(this.#deps.store, new Date())
    for (const id of overdue) await this.expireDecision(id)
    return overdue.length
  }

  /**
   * After a switch that makes commands name designated approvers (to `direct`): their pending decisions
   * asked without any are reserved to them, so the approvers' list shows them. Returns how many.
   */
  async reserveForApprovers(): Promise<number> {
    const byList = new Map<string, { names: readonly string[]; commandIds: string[] }>()
    for (const command of this.#deps.catalog.list()) {
      const names = command.approversWhen?.() ?? null
      if (!names || names.length === 0) continue
      const key = JSON.stringify(names)
      const entry = byList.get(key) ?? { names, commandIds: [] }
      entry.commandIds.push(command.spec.id)
      byList.set(key, entry)
    }
    let reserved = 0
    for (const { names, commandIds } of byList.values()) {
      const ids = await activeUserIds(this.#deps.store, names)
      reserved += await reservePendingDecisions(this.#deps.store, commandIds, ids)
    }
    return reserved
  }

  /** The designated approvers the decision's command names today (none that exist: nobody), or null. */
  async #approversNow(decision: DecisionRecord): Promise<string[] | null> {
    const named = this.#deps.catalog.get(decision.commandId)?.approversWhen?.() ?? null
    if (!named || named.length === 0) return null
    return (await activeUserIds(this.#deps.store, named)).filter((id) => id !== decision.ownerId)
  }

  /**
   * Whether a user may see and answer a decision: it is on their behalf, waits for them as a designated
   * approver, or is a project's own call (outside any conversation) in a project they own.
   */
  async canAct(userId: string, decision: DecisionRecord): Promise<boolean> {
    if (decision.ownerId === userId || decision.approvers?.includes(userId)) return true
    // Asked before the backend switched to `direct`: today's designated approvers may answer it by id.
    if (!decision.approvers && decision.status === 'pending' && (await this.#approversNow(decision))?.includes(userId))
      return true
    // A conversation is its owner's alone (the project's owner does not see a member's): so are its calls.
    if (!decision.projectId || decision.conversationId) return false
    const project = await this.#deps.access.project(userId, decision.projectId, 'write')
    return project?.ownerId === userId
  }
}

/** Whether a repeated answer's reply is the one the decision already holds (none, the same params or text). */
function sameReply(held: DecisionReply | null, asked: DecisionReply | undefined): boolean {
  if (!held || !asked) return !held && !asked
  if (held.kind === 'edit' && asked.kind === 'edit')
    return hashParams(held.params as Params) === hashParams(asked.params as Params)
  if (held.kind === 'respond' && asked.kind === 'respond') return held.text === asked.text
  return false
}
