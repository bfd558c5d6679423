import { createInterface, type Interface } from 'node:readline/promises'
import { createClient, PlinthError, type PlinthClient, type PlinthEvent } from '../client/index.js'
import { runLocalCommand } from './local-command.js'
import { paint } from './paint.js'
import { holdsControls, shown } from './terminal-text.js'

export interface ChatOptions {
  url: string
  token: string
  project?: string
  conversation?: string
  /** The model of the runs (a configured model id, GET /api/models); default: the project's. */
  model?: string
  /** Ask once, print the answer, exit (no prompts: nothing that would ask runs). */
  once?: string
  /** A proposed command is killed after this long (ms). */
  commandTimeoutMs: number
  /** Output of a proposed command sent back, at most (bytes). */
  outputMaxBytes: number
  input: NodeJS.ReadableStream
  output: NodeJS.WritableStream & { isTTY?: boolean }
  errorOutput: NodeJS.WritableStream
}

interface Turn {
  runId: string | null
  lastEventId: number | null
  ended: string | null
  answer: string
  /** Decisions and client calls already answered (a reconnect replays their events). */
  handled: Set<string>
  streaming: boolean
  cancelling: boolean
  /** Risk of proposed commands, from `tool_call.created`. */
  risks: Map<string, { risk: string | null; matchedRules: Array<{ id: string; description?: string }> }>
  /** Preview and evaluated risk of decisions, from `decision.required`. */
  decisions: Map<string, { preview: string | null; risk: string | null }>
}

const terminal = new Set(['run.completed', 'run.failed', 'run.cancelled', 'run.expired'])

/** How `plinth chat` answers a decision (POST /api/decisions/:id). */
type DecisionReply =
  | { decision: 'approve' | 'approve_session' | 'reject' }
  | { decision: 'edit'; params: Record<string, unknown> }
  | { decision: 'respond'; text: string }

/**
 * `plinth chat`: a terminal client. Streams the answer as it arrives, shows tool calls, asks for
 * decisions inline, runs proposed commands locally after approval, cancels with Ctrl-C (twice quits),
 * and reconnects with the last event id when the connection drops.
 */
export class ChatSession {
  readonly #options: ChatOptions
  readonly #client: PlinthClient
  readonly #color: boolean
  #rl: Interface | null = null
  #turn: Turn | null = null
  /** Ends the session with `code` (130: Ctrl-C twice; 0: the input ran dry). */
  #quit: ((code?: number) => void) | null = null
  /** The question open right now (Ctrl-C aborts it). */
  #prompt: AbortController | null = null

  constructor(options: ChatOptions) {
    this.#options = options
    this.#client = createClient({ baseUrl: options.url, token: options.token, streamTickets: false })
    this.#color = options.output.isTTY === true && !process.env.NO_COLOR
  }

  /** Runs the session; resolves to the process exit code. */
  async run(): Promise<number> {
    try {
      const me = await this.#withRetry('sign in', () => this.#client.me())
      const conversationId = await this.#pickConversation()
      if (this.#options.once !== undefined) return await this.#once(conversationId, this.#options.once)
      this.#say(
        paint(
          this.#color,
          'dim',
          `signed in as ${oneLine(String(me.name))} — conversation ${conversationId}; Ctrl-C cancels a run, twice quits; /quit ends`,
        ),
      )
      return await this.#repl(conversationId)
    } catch (error) {
      this.#fail(error)
      return 1
    } finally {
      this.#rl?.close()
    }
  }

  async #repl(conversationId: string): Promise<number> {
    const rl = this.#readline()
    let lastInterrupt = 0
    const quitting = new Promise<number>((resolve) => (this.#quit = (code = 130) => resolve(code)))
    rl.on('SIGINT', () => {
      const now = Date.now()
      // At a prompt: end it at once (no Enter needed) and cancel the run it belongs to.
      if (this.#prompt) {
        this.#prompt.abort()
        lastInterrupt = now
        this.#say('')
        void this.#cancel()
        return
      }
      if (this.#turn && !this.#turn.ended && !this.#turn.cancelling && now - lastInterrupt > 1500) {
        lastInterrupt = now
        void this.#cancel()
        return
      }
      if (!this.#turn || this.#turn.ended || now - lastInterrupt <= 1500) {
        this.#say('')
        this.#quit?.()
      }
      lastInterrupt = now
    })
    for (;;) {
      const line = await Promise.race([
        rl.question(paint(this.#color, 'bold', 'you> ')).catch(() => '/quit'),
        quitting.then(() => '/quit'),
      ])
      const text = line.trim()
      if (text === '/quit' || text === '/exit') return (await Promise.race([quitting, Promise.resolve(0)])) || 0
      if (text === '') continue
      const status = await Promise.race([
        this.#runTurn(conversationId, text, { interactive: true }),
        quitting.then(() => 'quit'),
      ])
      if (status === 'quit') return quitting
    }
  }

  async #once(conversationId: string, question: string): Promise<number> {
    const status = await this.#runTurn(conversationId, question, { interactive: false })
    if (status === 'run.completed') {
      this.#options.output.write(`${shown(this.#turn?.answer.trim() ?? '')}\n`)
      return 0
    }
    return 1
  }

  /** Posts a message and follows its run to the end, reconnecting when the stream drops. */
  async #runTurn(conversationId: string, input: string, mode: { interactive: boolean }): Promise<string> {
    const turn: Turn = {
      runId: null,
      lastEventId: null,
      ended: null,
      answer: '',
      handled: new Set(),
      streaming: false,
      cancelling: false,
      risks: new Map(),
      decisions: new Map(),
    }
    this.#turn = turn
    const body = {
      ...(mode.interactive
        ? { input, clientTools: ['propose_command'] }
        : { input, approvalPolicy: 'dontAsk' as const }),
      ...(this.#options.model && { model: this.#options.model }),
    }
    // plinth/client follows the run: after a drop or a restart it reconnects with the last event id.
    const onState = (state: string, info: { delayMs: number; lastEventId: string | null }): void => {
      if (state !== 'reconnecting') return
      const where = turn.runId
        ? `run ${turn.runId}, after event ${info.lastEventId ?? 0}`
        : 'the run is not created yet'
      this.#say(
        paint(
          this.#color,
          'yellow',
          `\nconnection lost; reconnecting in ${(info.delayMs / 1000).toFixed(1)} s (${where})`,
        ),
      )
    }
    try {
      for await (const event of this.#client.runs.start(conversationId, body, { onState }))
        await this.#onEvent(turn, event, mode)
    } catch (error) {
      this.#fail(error)
      return 'failed'
    }
    return turn.ended ?? 'failed'
  }

  async #onEvent(turn: Turn, event: PlinthEvent, mode: { interactive: boolean }): Promise<void> {
    if (event.id) turn.lastEventId = Number(event.id)
    const data = event.data as Record<string, unknown>
    switch (event.event) {
      case 'run.created':
        turn.runId = String((data.run as { id?: string } | undefined)?.id ?? turn.runId)
        break
      case 'message.delta':
        if (!mode.interactive) break
        if (!turn.streaming) this.#options.output.write(paint(this.#color, 'cyan', 'agent> '))
        turn.streaming = true
        this.#options.output.write(shown(String(data.text ?? '')))
        break
      case 'message.completed':
        // A message cut off (the server stopped, the run was taken over): marked, so that the answer a
        // resumed run makes again from its start is not read as a second one.
        if (turn.streaming)
          this.#options.output.write(
            data.status === 'interrupted' ? `${paint(this.#color, 'yellow', ' (interrupted)')}\n` : '\n',
          )
        turn.streaming = false
        if (typeof data.content === 'string' && data.content && !data.toolCalls) turn.answer = data.content
        break
      case 'tool_call.created':
        if (data.kind === 'client')
          turn.risks.set(String(data.callId), {
            risk: (data.risk as string | null) ?? null,
            matchedRules: (data.matchedRules as Array<{ id: string; description?: string }>) ?? [],
          })
        else if (mode.interactive)
          this.#say(paint(this.#color, 'dim', `  → ${oneLine(`${String(data.name)} ${JSON.stringify(data.args)}`)}`))
        break
      case 'tool_call.completed':
        if (mode.interactive)
          this.#say(paint(this.#color, 'dim', `  ← ${oneLine(`${String(data.status)} ${preview(data.output)}`)}`))
        break
      case 'decision.required':
        turn.decisions.set(String(data.decisionId), {
          preview: typeof data.preview === 'string' ? data.preview : null,
          risk: typeof data.risk === 'string' ? data.risk : null,
        })
        break
      case 'run.status':
        if (data.status === 'requires_action' && mode.interactive)
          await this.#answer(turn, data.requiredAction as RequiredAction | undefined)
        break
      default:
        if (terminal.has(event.event)) {
          turn.ended = event.event
          if (event.event === 'run.failed')
            this.#options.errorOutput.write(
              `${paint(this.#color, 'red', `the run failed: ${oneLine(failure(data.error))}`)}\n`,
            )
          if (event.event === 'run.cancelled')
            this.#say(
              paint(
                this.#color,
                'yellow',
                `(cancelled${data.reason && data.reason !== 'cancelled' ? `: ${oneLine(String(data.reason))}` : ''})`,
              ),
            )
          if (event.event === 'run.expired')
            this.#say(paint(this.#color, 'yellow', '(the run expired waiting for an answer)'))
        }
    }
  }

  /** What the run waits for: decisions, then proposed commands. */
  async #answer(turn: Turn, required: RequiredAction | undefined): Promise<void> {
    for (const decision of required?.decisions ?? []) {
      if (turn.handled.has(decision.decisionId) || turn.ended) continue
      turn.handled.add(decision.decisionId)
      const seen = turn.decisions.get(decision.decisionId)
      let answer = await this.#askDecision(decision, seen)
      for (;;) {
        // Ctrl-C: the run is being cancelled, nothing more to answer.
        if (answer === null) return
        try {
          await this.#client.decisions.answer(decision.decisionId, answer)
        } catch (error) {
          // Edited arguments the command refuses: say why and ask for them again (an empty answer goes
          // back to the choice, without showing the decision a second time).
          if (error instanceof PlinthError && error.code === 'validation_failed') {
            this.#say(paint(this.#color, 'red', `    ${oneLine(error.message)}`))
            const edited = answer.decision === 'edit' ? await this.#askEdit(decision, true) : undefined
            answer = edited === undefined ? await this.#askDecision(decision, seen, true) : edited
            continue
          }
          if (error instanceof PlinthError && (error.code === 'decision_conflict' || error.code === 'decision_expired'))
            this.#say(
              paint(
                this.#color,
                'dim',
                `    (already ${error.code === 'decision_expired' ? 'expired' : 'answered elsewhere'})`,
              ),
            )
          else throw error
        }
        break
      }
    }
    for (const call of required?.toolOutputs ?? []) {
      if (turn.handled.has(call.callId) || turn.ended) continue
      turn.handled.add(call.callId)
      const output =
        call.name === 'propose_command'
          ? await this.#proposedCommand({ ...call, ...turn.risks.get(call.callId) })
          : { accepted: false, error: `plinth chat cannot run the client tool ${call.name}` }
      if (output === null) return
      try {
        await this.#client.toolOutputs.submit(turn.runId ?? '', [{ callId: call.callId, output }])
      } catch (error) {
        if (!(error instanceof PlinthError && error.code === 'run_not_waiting')) throw error
      }
    }
  }

  /**
   * Shows a decision's preview and evaluated risk (unless `again`: asked anew after a refused answer)
   * and asks (its arguments on request); null: Ctrl-C.
   */
  async #askDecision(
    decision: PendingDecision,
    seen: { preview: string | null; risk: string | null } | undefined,
    again = false,
  ): Promise<DecisionReply | null> {
    const risk = seen?.risk ?? decision.risk ?? 'unknown'
    const preview = seen?.preview ?? null
    if (!again) {
      this.#say(
        paint(
          this.#color,
          risk === 'high' ? 'red' : 'yellow',
          `  ? ${oneLine(String(decision.name))} wants to run (${oneLine(risk)} risk)${preview ? '' : `: ${oneLine(JSON.stringify(decision.args))}`}`,
        ),
      )
      // Marked as the preview, so none of its lines passes for a line of the prompt.
      if (preview) this.#say(indentWith(shown(preview), '    │ '))
    }
    for (;;) {
      const answer = await this.#ask(
        `    approve? [y] once, [s] for this session, [n] reject, [e] edit arguments, [r] respond instead${preview ? ', [a] arguments' : ''}: `,
      )
      if (answer === null) return null
      const text = answer.trim().toLowerCase()
      if (text === 'y' || text === 'yes') return { decision: 'approve' }
      if (text === 's') return { decision: 'approve_session' }
      if (text === 'e') {
        const edited = await this.#askEdit(decision)
        if (edited !== undefined) return edited
        continue
      }
      if (text === 'r') {
        const reply = await this.#ask('    your answer for the model: ')
        if (reply === null) return null
        if (reply.trim()) return { decision: 'respond', text: reply.trim() }
        continue
      }
      if (text === 'n' || text === 'no') return { decision: 'reject' }
      // Anything else is asked again: a stray answer (pasted JSON, a typo) must not decide for the person.
      if (text !== 'a' && text !== '?') {
        this.#say(paint(this.#color, 'dim', `    answer y, s, n, e or r${preview ? ', or a for the arguments' : ''}`))
        continue
      }
      this.#say(paint(this.#color, 'dim', `    args: ${oneLine(JSON.stringify(decision.args))}`))
    }
  }

  /**
   * Asks for a decision's edited arguments until they are a JSON object (`refused`: the last ones were,
   * so the arguments are not shown again); undefined: an empty answer, back to the choice; null: Ctrl-C.
   */
  async #askEdit(decision: PendingDecision, refused = false): Promise<DecisionReply | null | undefined> {
    if (!refused) this.#say(paint(this.#color, 'dim', `    args: ${oneLine(JSON.stringify(decision.args))}`))
    else this.#say(paint(this.#color, 'dim', '    (an empty answer goes back to approve or reject)'))
    for (;;) {
      const edited = await this.#ask('    new arguments (JSON): ')
      if (edited === null) return null
      if (!edited.trim()) return undefined
      try {
        const params: unknown = JSON.parse(edited)
        if (params && typeof params === 'object' && !Array.isArray(params))
          return { decision: 'edit', params: params as Record<string, unknown> }
      } catch {
        // Said below.
      }
      this.#say(paint(this.#color, 'red', '    not a JSON object; nothing sent (an empty answer goes back)'))
    }
  }

  /** Shows a proposed command with its risk, asks, runs it here, and returns what the model reads (null: Ctrl-C). */
  async #proposedCommand(call: {
    callId: string
    args: { command?: unknown; reason?: unknown }
    risk?: string | null
    matchedRules?: Array<{ id: string; description?: string }>
  }): Promise<Record<string, unknown> | null> {
    const command = String(call.args?.command ?? '')
    const risk = call.risk ?? 'medium'
    const high = risk === 'high'
    // A multi-line command's further lines are marked as such, so none passes for a line of this prompt.
    const lines = shown(command).split('\n')
    this.#say(
      paint(this.#color, high ? 'red' : 'yellow', lines.map((line, i) => `  ${i ? '>' : '$'} ${line}`).join('\n')),
    )
    if (call.args?.reason) this.#say(paint(this.#color, 'dim', `    why: ${oneLine(String(call.args.reason))}`))
    this.#say(
      paint(
        this.#color,
        high ? 'red' : 'dim',
        `    risk: ${oneLine(risk)}${call.matchedRules && call.matchedRules.length > 0 ? ` — ${oneLine(call.matchedRules.map((rule) => rule.description ?? rule.id).join('; '))}` : ''}`,
      ),
    )
    // What the terminal would hide or repaint is not run at all: what is approved must be what was seen.
    if (holdsControls(command)) {
      this.#say(paint(this.#color, 'red', '    not run: the command holds control characters (shown escaped above)'))
      return { accepted: false, error: 'plinth chat does not run a command that holds control characters' }
    }
    const asked = await this.#ask(high ? '    HIGH RISK — type "yes" to run it here: ' : '    run it here? [y/n] ')
    if (asked === null) return null
    const answer = asked.trim().toLowerCase()
    const approved = high ? answer === 'yes' : answer === 'y' || answer === 'yes'
    if (!approved) {
      this.#say(paint(this.#color, 'dim', '    declined'))
      return { accepted: false, rejected: true }
    }
    const result = await runLocalCommand(command, {
      cwd: process.cwd(),
      timeoutMs: this.#options.commandTimeoutMs,
      maxBytes: this.#options.outputMaxBytes,
    })
    if (result.output) this.#options.output.write(indent(shown(result.output)))
    this.#say(
      paint(
        this.#color,
        'dim',
        `    exit ${result.exitCode ?? 'none'}${result.timedOut ? ` (killed after ${this.#options.commandTimeoutMs} ms)` : ''}${result.truncated ? ' (output truncated)' : ''}`,
      ),
    )
    return {
      accepted: true,
      exitCode: result.exitCode,
      output: result.output,
      truncated: result.truncated,
      timedOut: result.timedOut,
    }
  }

  async #cancel(): Promise<void> {
    const turn = this.#turn
    if (!turn?.runId || turn.ended) return
    turn.cancelling = true
    this.#say(paint(this.#color, 'yellow', '\ncancelling the run… (Ctrl-C again to quit)'))
    await this.#client.runs.cancel(turn.runId).catch((error: unknown) => this.#fail(error))
  }

  async #pickConversation(): Promise<string> {
    if (this.#options.conversation) return this.#options.conversation
    let projectId = this.#options.project
    if (!projectId) {
      const projects = await this.#client.projects.list({ limit: 20 })
      if (this.#options.once !== undefined || projects.items.length === 0) {
        const name = projects.items.length === 0 ? 'chat' : undefined
        projectId = name ? (await this.#client.projects.create({ name })).id : projects.items[0]!.id
      } else {
        projects.items.forEach((project, index) =>
          this.#say(`  ${index + 1}. ${oneLine(project.name)}${project.shared ? ' (shared)' : ''}`),
        )
        const answer = ((await this.#ask('project number, or a name for a new one: ')) ?? '').trim()
        const picked = /^\d+$/.test(answer) ? projects.items[Number(answer) - 1] : undefined
        projectId = picked?.id ?? (await this.#client.projects.create({ name: answer || 'chat' })).id
      }
    }
    const conversation = await this.#client.conversations.create(projectId)
    return conversation.id
  }

  /** Calls `fn`, retrying with backoff while the server cannot be reached (and saying so). */
  async #withRetry<T>(what: string, fn: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn()
      } catch (error) {
        if (!(error instanceof PlinthError && error.code === 'unreachable') || attempt >= 5) throw error
        const delay = 500 * 2 ** attempt
        this.#options.errorOutput.write(`${error.message}; retrying ${what} in ${(delay / 1000).toFixed(1)} s\n`)
        await sleep(delay)
      }
    }
  }

  #readline(): Interface {
    this.#rl ??= createInterface({
      input: this.#options.input,
      output: this.#options.output,
      terminal: this.#options.output.isTTY === true,
    })
    return this.#rl
  }

  /** Asks a question; null when Ctrl-C ended it, or the input has (a pipe that ran dry: nobody is left to answer). */
  async #ask(question: string): Promise<string | null> {
    const prompt = new AbortController()
    this.#prompt = prompt
    try {
      return await this.#readline().question(question, { signal: prompt.signal })
    } catch (error) {
      if (prompt.signal.aborted) return null
      // The input ran dry (a pipe): nobody is left to answer, so the session ends here; what was
      // asked stays open for another client.
      if ((error as { code?: unknown }).code === 'ERR_USE_AFTER_CLOSE') {
        this.#quit?.(0)
        return null
      }
      return ''
    } finally {
      if (this.#prompt === prompt) this.#prompt = null
    }
  }

  #say(line: string): void {
    this.#options.output.write(`${line}\n`)
  }

  #fail(error: unknown): void {
    const message =
      error instanceof PlinthError
        ? error.status === 401
          ? 'the token was refused (missing, revoked or for a disabled user); check --token / PLINTH_TOKEN'
          : `${error.code}: ${error.message}`
        : error instanceof Error
          ? error.message
          : String(error)
    this.#options.errorOutput.write(`${paint(this.#color, 'red', `plinth chat: ${shown(message)}`)}\n`)
  }
}

/** A decision the run waits for, as `run.requires_action` names it. */
interface PendingDecision {
  decisionId: string
  name: string
  args: unknown
  risk?: string | null
}

interface RequiredAction {
  decisions?: PendingDecision[]
  toolOutputs?: Array<{
    callId: string
    name: string
    args: { command?: unknown; reason?: unknown }
    risk?: string | null
    matchedRules?: Array<{ id: string; description?: string }>
  }>
}

function oneLine(text: string): string {
  return shown(text, { oneLine: true })
}

function preview(value: unknown): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value)
  return text.length > 120 ? `${text.slice(0, 117)}...` : text
}

/** A run's error as `code: message`. */
function failure(error: unknown): string {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown }
  if (typeof code !== 'string') return JSON.stringify(error)
  return typeof message === 'string' && message ? `${code}: ${message}` : code
}

function indentWith(text: string, prefix: string): string {
  return text
    .split('\n')
    .map((line) => `${prefix}${line}`)
    .join('\n')
}

function indent(text: string): string {
  return `${text
    .replace(/\n$/, '')
    .split('\n')
    .map((line) => `    | ${line}`)
    .join('\n')}\n`
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}
