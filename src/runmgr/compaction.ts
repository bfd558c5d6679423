import type { PluginLogger } from '../extension/index.js'
import type { LanguageModel, ModelRegistry, Usage } from '../llm/index.js'
import {
  appendEvents,
  insertCompaction,
  insertModelCall,
  latestCompaction,
  readTranscriptTail,
  runEvent,
  type Compaction,
  type ModelCallUsage,
  type Run,
  type Store,
  type TranscriptRow,
} from '../store/index.js'
import { countedUsage } from './call-usage.js'
import { transcriptBudget } from './transcript-window.js'

/** The summary call a compaction made: its model and what it used. */
export interface SummaryCall {
  model: string
  usage: ModelCallUsage
}

/** The config file's `compaction` section (docs/guides/agent-runs.md#context-compaction). */
export interface CompactionSettings {
  /** Compact automatically at a run's start (forcing over HTTP works either way). */
  enabled: boolean
  /** Compact when the uncompacted transcript passes this share of the model's context window. */
  threshold: number
  /** How much of the context window the newest messages, kept as they are, may take. */
  keepRecent: number
  /** The model that writes summaries (default: the run's). */
  model?: string
  /** Its instructions (default: `defaultCompactionPrompt`). */
  prompt?: string
}

export const defaultCompactionSettings: CompactionSettings = { enabled: true, threshold: 0.75, keepRecent: 0.25 }

export const defaultCompactionPrompt =
  'You compact a conversation between a user and an AI agent so the agent can continue it without the full transcript. ' +
  'Write a concise summary of what is below: the user’s goals and preferences, decisions made, facts learned (names, numbers, ids, file paths), ' +
  'tools called and what they returned when it still matters, and what is still open. Fold in the earlier summary if there is one. ' +
  'Write only the summary, in the conversation’s language.'

/** Characters per token, as the rest of the window arithmetic assumes. */
const charsPerToken = 4
/** One message's text in the summariser's input is cut to this. */
const maxRenderedChars = 2000

/** What to summarise and what to keep, cut at the start of a user turn (so no tool call is parted from its result). */
export interface CompactionPlan {
  summarize: TranscriptRow[]
  keep: TranscriptRow[]
}

/**
 * Where to cut: the newest messages that fit `keepRecent` of the window stay, moved forward to the next
 * user message (the start of a turn: an assistant's tool calls and their results are never split); the
 * rest is summarised. Undefined when the transcript is under the threshold (unless forced) or has no
 * turn boundary to cut at.
 */
export function planCompaction(
  rows: readonly TranscriptRow[],
  contextWindow: number,
  settings: Pick<CompactionSettings, 'threshold' | 'keepRecent'>,
  force = false,
): CompactionPlan | undefined {
  const total = rows.reduce((sum, row) => sum + row.size, 0)
  if (!force && total <= settings.threshold * contextWindow * charsPerToken) return undefined
  // Forced: everything before the last user turn.
  const at = force
    ? rows.findLastIndex((row) => row.role === 'user')
    : keepFrom(rows, settings.keepRecent * contextWindow * charsPerToken)
  if (at <= 0) return undefined
  return { summarize: rows.slice(0, at), keep: rows.slice(at) }
}

/** Where the kept rows start: the newest that fit `keepChars`, moved to a turn's start (-1: none). */
function keepFrom(rows: readonly TranscriptRow[], keepChars: number): number {
  let cut = rows.length
  let kept = 0
  while (cut > 0 && kept + rows[cut - 1]!.size <= keepChars) kept += rows[--cut]!.size
  // Forward to a turn's start; with none there, back to the last one before the cut.
  let at = cut
  while (at < rows.length && rows[at]!.role !== 'user') at++
  if (at < rows.length) return at
  at = Math.min(cut, rows.length - 1)
  while (at >= 0 && rows[at]!.role !== 'user') at--
  return at
}

/** The transcript as the summariser reads it: one line per message, long texts cut, newest kept within `maxChars`. */
export function renderForSummary(rows: readonly TranscriptRow[], maxChars: number): string {
  const lines: string[] = []
  let chars = 0
  for (let index = rows.length - 1; index >= 0; index--) {
    const line = renderRow(rows[index]!)
    if (chars + line.length > maxChars) {
      lines.push(`[${index + 1} earlier messages left out]`)
      break
    }
    chars += line.length + 1
    lines.push(line)
  }
  return lines.reverse().join('\n')
}

function renderRow(row: TranscriptRow): string {
  const cut = (text: string) => (text.length > maxRenderedChars ? `${text.slice(0, maxRenderedChars)}…` : text)
  if (row.role === 'tool') return `Tool result: ${cut(row.content ?? '')}`
  if (row.role === 'assistant') {
    const calls = (row.toolCalls ?? []).map((call) => ` [called ${call.name} ${cut(call.arguments)}]`).join('')
    return `Assistant: ${cut(row.content ?? '')}${calls}`
  }
  const images = row.parts?.filter((part) => part.type === 'image').length ?? 0
  const files = (row.parts ?? []).flatMap((part) => (part.type === 'file' ? [part.filename] : []))
  return `${row.role === 'user' ? 'User' : 'System'}: ${cut(row.content ?? '')}${images > 0 ? ` [${images} image(s)]` : ''}${files.length > 0 ? ` [documents: ${files.join(', ')}]` : ''}`
}

/** The prompt's message standing for the compacted messages (data, like retrieved knowledge). */
export function summaryBlock(compaction: Pick<Compaction, 'summary' | 'messageCount'>): string {
  const text = compaction.summary.replaceAll('conversation-summary>', 'conversation-summary]')
  return `<conversation-summary>\nA summary of the ${compaction.messageCount} earlier messages of this conversation (the transcript continues after it).\n\n${text}\n</conversation-summary>`
}

/** A summary call that failed (the run goes on without compacting). */
export class CompactionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'CompactionError'
  }
}

/**
 * Context compaction (docs/guides/agent-runs.md#context-compaction): at a run's start, a transcript past
 * the threshold has its oldest turns summarised by one model call into a compaction that later prompts
 * send instead of them; the messages stay stored. Forcing it over HTTP does the same for a conversation.
 */
export class Compactor {
  readonly #store: Store
  readonly #models: ModelRegistry
  readonly #settings: CompactionSettings
  readonly #log: PluginLogger

  constructor(deps: {
    store: Store
    models: ModelRegistry
    settings?: Partial<CompactionSettings>
    log: PluginLogger
  }) {
    this.#store = deps.store
    this.#models = deps.models
    this.#settings = { ...defaultCompactionSettings, ...deps.settings }
    this.#log = deps.log
  }

  /**
   * The compaction a run's first prompt uses and the window rows after it: compacting first when the
   * window is past the threshold. A summary call that fails is logged and reported on the run's stream
   * (`compaction.failed`); the run goes on with the window as it is.
   */
  async atRunStart(
    run: Run,
    model: LanguageModel,
    rows: TranscriptRow[],
    signal: AbortSignal,
    /** The newest compaction when already read (null: none), e.g. by the statement that started the run. */
    known?: Compaction | null,
  ): Promise<{ compaction: Compaction | undefined; rows: TranscriptRow[]; call?: SummaryCall }> {
    let call: SummaryCall | undefined
    let compaction =
      known === undefined ? await latestCompaction(this.#store, run.conversationId) : (known ?? undefined)
    const plan = this.#settings.enabled ? planCompaction(rows, model.contextWindow, this.#settings) : undefined
    if (plan) {
      try {
        const compacted = await this.#compact(run.conversationId, plan, compaction, model.id, {
          runId: run.id,
          projectId: run.projectId,
          userId: run.ownerId,
          signal,
        })
        compaction = compacted.compaction
        call = compacted.call
      } catch (error) {
        if (signal.aborted) throw error
        const message = error instanceof Error ? error.message : String(error)
        this.#log.warn('context compaction failed; the run goes on without it', { runId: run.id, err: error })
        await this.#store.transaction((tx) =>
          appendEvents(tx, [runEvent(run, 'compaction.failed', { runId: run.id, error: { message } })]),
        )
      }
    }
    const through = compaction?.throughMessageId
    return { compaction, rows: through ? rows.filter((row) => row.id > through) : rows, ...(call && { call }) }
  }

  /** Compacts a conversation now (all but its last turn at most); undefined when there is nothing to compact. */
  async force(
    conversation: { id: string; projectId: string; ownerId: string },
    modelId: string,
  ): Promise<Compaction | undefined> {
    const model = this.#models.get(modelId)
    if (!model) throw new CompactionError(`no model ${modelId}`)
    const rows = await readTranscriptTail(this.#store, conversation.id, transcriptBudget(model))
    const plan = planCompaction(rows, model.contextWindow, this.#settings, true)
    if (!plan) return undefined
    const previous = await latestCompaction(this.#store, conversation.id)
    const { compaction } = await this.#compact(conversation.id, plan, previous, model.id, {
      runId: null,
      projectId: conversation.projectId,
      userId: conversation.ownerId,
    })
    return compaction
  }

  async #compact(
    conversationId: string,
    plan: CompactionPlan,
    previous: Compaction | undefined,
    runModel: string,
    by: { runId: string | null; projectId: string; userId: string; signal?: AbortSignal },
  ): Promise<{ compaction: Compaction | undefined; call: SummaryCall }> {
    const modelId = this.#settings.model ?? runModel
    const summarizer = this.#models.get(modelId)
    if (!summarizer) throw new CompactionError(`the compaction model ${modelId} is not configured`)
    const { summary, reported } = await this.#summarize(summarizer, previous?.summary, plan.summarize, by.signal)
    // The summary call costs like any other: recorded with the compaction, in the run's usage when a run made it.
    const call: SummaryCall = { model: modelId, usage: countedUsage(reported, this.#models.priceOf(modelId)) }
    const inserted = await this.#store.transaction(async (tx) => {
      const owner = { id: by.runId, conversationId, projectId: by.projectId, ownerId: by.userId }
      await insertModelCall(tx, owner, call.model, call.usage)
      return insertCompaction(tx, {
        conversationId,
        afterMessageId: previous?.throughMessageId ?? null,
        throughMessageId: plan.summarize.at(-1)!.id,
        summary,
        model: modelId,
        runId: by.runId,
        projectId: by.projectId,
        userId: by.userId,
      })
    })
    // Another compaction got as far meanwhile: that one is the newest.
    return { compaction: inserted ?? (await latestCompaction(this.#store, conversationId)), call }
  }

  async #summarize(
    model: LanguageModel,
    previous: string | undefined,
    rows: readonly TranscriptRow[],
    signal: AbortSignal | undefined,
  ): Promise<{ summary: string; reported: Usage }> {
    const prompt = this.#settings.prompt ?? defaultCompactionPrompt
    // Half the summariser's window for the transcript; the rest for the instructions and the answer.
    const budget = Math.floor(model.contextWindow * charsPerToken * 0.5) - (previous?.length ?? 0)
    const input = [
      previous ? `Earlier summary:\n${previous}\n` : '',
      'Transcript to summarise:',
      renderForSummary(rows, Math.max(budget, 1000)),
    ].join('\n')
    let text = ''
    let reported: Usage = { inputTokens: 0, outputTokens: 0 }
    try {
      for await (const part of model.stream({
        messages: [
          { role: 'system', content: prompt },
          { role: 'user', content: input },
        ],
        tools: [],
        ...(signal && { signal }),
      })) {
        if (part.type === 'text-delta') text += part.text
        else if (part.type === 'usage') reported = part.usage
      }
    } catch (error) {
      throw new CompactionError(`the summary call failed: ${error instanceof Error ? error.message : String(error)}`, {
        cause: error,
      })
    }
    if (text.trim().length === 0) throw new CompactionError('the summary call answered nothing')
    return { summary: text.trim(), reported }
  }
}
