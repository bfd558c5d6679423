import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import {
  alwaysAsks,
  type CommandBus,
  type DecisionAnswer,
  type DispatchOutcome,
  type Params,
  type RegisteredCommand,
} from '../../cmdbus/index.js'
import { answerMcpElicitation, createMcpElicitation, mcpElicitationState, type Store } from '../../store/index.js'

/**
 * A call that needs a person, asked of the MCP client through elicitation (docs/mcp.md, "Sessions
 * and elicitation"). The request's id names the decision, so the client's answer — a POST that any
 * instance may receive — finds it; the instance holding the call learns the outcome from Postgres.
 */
export const elicitationIdPrefix = 'plinth-decision:'

/** Wakes a waiting call at once when its answer reaches this instance (others poll). */
const wakers = new Map<string, () => void>()

const firstPollMs = 100
const maxPollMs = 1_000
/** How long an approved call's answer waits for its command before saying it still runs. */
const maxRunWaitMs = 10 * 60 * 1000

export class McpElicitor {
  readonly #bus: CommandBus
  readonly #store: Store
  readonly #transport: Transport
  readonly #sessionId: string
  readonly #userId: string

  constructor(deps: { bus: CommandBus; store: Store; transport: Transport; session: { id: string; userId: string } }) {
    this.#bus = deps.bus
    this.#store = deps.store
    this.#transport = deps.transport
    this.#sessionId = deps.session.id
    this.#userId = deps.session.userId
  }

  /**
   * Asks the client to decide the waiting call, then waits for the decision to be answered (by the
   * client or anywhere else) and the command to finish. Returns the waiting outcome unchanged when the
   * client cancels, goes away, or the decision outlives the wait: the decision stays open.
   */
  async ask(
    command: RegisteredCommand,
    waiting: Extract<DispatchOutcome, { status: 'awaiting_decision' }>,
    requestId: string | number,
    signal: AbortSignal,
  ): Promise<DispatchOutcome> {
    const { decision } = waiting
    // A call only designated approvers may approve is not put to this user: the answer says who must.
    if (!(await this.#bus.mayApprove(decision.id, this.#userId))) return waiting
    await createMcpElicitation(this.#store, decision.id, this.#sessionId)
    // A session allowance needs a conversation, and never covers a command that asks every time.
    const allowable = decision.conversationId !== null && !alwaysAsks(command, decision.params as Params)
    const choices: DecisionAnswer[] = allowable ? ['approve', 'approve_session', 'reject'] : ['approve', 'reject']
    const args = decision.preview ?? JSON.stringify(decision.params)
    await this.#transport.send(
      {
        jsonrpc: '2.0',
        id: `${elicitationIdPrefix}${decision.id}`,
        method: 'elicitation/create',
        params: {
          message:
            `Run ${command.spec.title ?? command.spec.id} (${command.spec.id})? It is ${decision.risk} risk: ${decision.reasons.join('; ')}.\n` +
            `Arguments: ${args.length > 2_000 ? `${args.slice(0, 2_000)}…` : args}`,
          requestedSchema: {
            type: 'object',
            properties: {
              decision: {
                type: 'string',
                title: 'Decision',
                description: allowable
                  ? 'approve: run it once; approve_session: and let this conversation run it again without asking; reject: do not run it'
                  : 'approve: run it once; reject: do not run it',
                enum: choices,
              },
            },
            required: ['decision'],
          },
        },
      },
      { relatedRequestId: requestId },
    )
    const deadline = Date.parse(decision.expiresAt)
    let pollMs = firstPollMs
    while (!signal.aborted && Date.now() < deadline) {
      const state = await mcpElicitationState(this.#store, decision.id)
      if (!state) return waiting
      if (state.decision !== 'pending') return this.#finished(waiting, signal)
      if (state.action === 'cancel') return waiting
      await sleep(pollMs, decision.id, signal)
      pollMs = Math.min(maxPollMs, Math.round(pollMs * 1.5))
    }
    return waiting
  }

  /** The outcome of the decided call, once its command has finished (whichever instance runs it). */
  async #finished(
    waiting: Extract<DispatchOutcome, { status: 'awaiting_decision' }>,
    signal: AbortSignal,
  ): Promise<DispatchOutcome> {
    const deadline = Date.now() + maxRunWaitMs
    let pollMs = firstPollMs
    while (!signal.aborted && Date.now() < deadline) {
      const outcome = await this.#bus.dispatchOutcome(waiting.dispatchId)
      if (outcome !== null) return outcome ?? waiting
      await sleep(pollMs, waiting.decision.id, signal)
      pollMs = Math.min(maxPollMs, Math.round(pollMs * 1.5))
    }
    // Approved and still running (or the server is stopping): the result will be in the audit.
    return {
      status: 'failed',
      dispatchId: waiting.dispatchId,
      error: {
        code: 'still_running',
        message: `approved; ${waiting.decision.commandId} is still running: its result will be on dispatch ${waiting.dispatchId} (GET /api/audit)`,
      },
    }
  }
}

/** One elicitation answer: a JSON-RPC response whose id names a decision. */
export interface ElicitationAnswer {
  decisionId: string
  /** The client's result, or null for an error response (taken as cancel). */
  result: unknown
}

/** The answers in a request body, and what else it holds (for the SDK). */
export function splitAnswers(body: unknown): { answers: ElicitationAnswer[]; rest: unknown } {
  const messages = Array.isArray(body) ? body : [body]
  const answers: ElicitationAnswer[] = []
  const rest: unknown[] = []
  for (const message of messages) {
    const id = isRecord(message) && !('method' in message) ? message.id : undefined
    if (typeof id === 'string' && id.startsWith(elicitationIdPrefix) && isRecord(message)) {
      answers.push({
        decisionId: id.slice(elicitationIdPrefix.length),
        result: 'result' in message ? message.result : null,
      })
    } else rest.push(message)
  }
  return { answers, rest: Array.isArray(body) ? rest : rest[0] }
}

/**
 * Applies the client's answer: `accept` with a decision answers it through the bus (the command runs
 * here, now), `decline` rejects it, `cancel` or anything unreadable leaves it open. Only the session
 * the question was put to may answer, once.
 */
export async function applyAnswer(
  bus: CommandBus,
  store: Store,
  session: { id: string; userId: string },
  answer: ElicitationAnswer,
): Promise<void> {
  const { action, decision } = readResult(answer.result)
  let recorded: 'accept' | 'decline' | 'cancel' = action
  if (action !== 'cancel') {
    const state = await mcpElicitationState(store, answer.decisionId)
    if (!state || state.sessionId !== session.id || state.action !== null) return
    const chosen: DecisionAnswer = action === 'decline' ? 'reject' : (decision ?? 'reject')
    let outcome = await bus.decide(answer.decisionId, session.userId, chosen, 'answered through MCP elicitation')
    // A command that asks every time, or a call outside a conversation, takes no session allowance: approved once instead.
    if (!outcome.ok && outcome.error.code === 'scope_not_allowed')
      outcome = await bus.decide(answer.decisionId, session.userId, 'approve', 'answered through MCP elicitation')
    if (!outcome.ok) recorded = 'cancel'
  }
  if (await answerMcpElicitation(store, answer.decisionId, session.id, recorded)) wakers.get(answer.decisionId)?.()
}

function readResult(result: unknown): { action: 'accept' | 'decline' | 'cancel'; decision?: DecisionAnswer } {
  if (!isRecord(result)) return { action: 'cancel' }
  if (result.action === 'decline') return { action: 'decline' }
  if (result.action !== 'accept') return { action: 'cancel' }
  const chosen = isRecord(result.content) ? result.content.decision : undefined
  if (chosen === 'approve' || chosen === 'approve_session' || chosen === 'reject')
    return { action: 'accept', decision: chosen }
  return { action: 'cancel' }
}

function isRecord(value: unknown): value is { [key: string]: unknown } {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
}

function sleep(ms: number, decisionId: string, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer)
      signal.removeEventListener('abort', done)
      if (wakers.get(decisionId) === done) wakers.delete(decisionId)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal.addEventListener('abort', done, { once: true })
    wakers.set(decisionId, done)
  })
}
