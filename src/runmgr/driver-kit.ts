import type { CallLedger, CommandBus } from '../cmdbus/index.js'
import type { PluginLogger } from '../extension/index.js'
import type { AnswerLimits, ModelRegistry } from '../llm/index.js'
import type { Retriever } from '../rag/index.js'
import type { Store } from '../store/index.js'
import type { Compactor } from './compaction.js'
import type { LeaseClock } from './leases.js'
import type { ModelSlots } from './model-slots.js'
import type { PeriodBudgets } from './period-budgets.js'
import type { RunObserver } from './run-observer.js'
import type { RunWriter } from './run-writer.js'
import type { WindowCache } from './transcript-window.js'

/**
 * What a round's steps (the loop, the model turn, the call executor) work with: the run manager's
 * components, each a named object, so the steps live in their own files.
 */
export interface DriverKit {
  store: Store
  bus: CommandBus
  models: ModelRegistry
  log: PluginLogger
  retriever: Retriever | undefined
  /** The operator's extra system-prompt text. */
  systemPrompt: string | undefined
  observer: RunObserver | undefined
  ledger: CallLedger
  modelSlots: ModelSlots
  /** Project and user budgets per day and month, checked before each model call. */
  periodBudgets: PeriodBudgets
  leases: LeaseClock
  /** The fenced writes and the ends of runs. */
  writer: RunWriter
  /** Reads a file of a conversation (the images of its messages). */
  readFile: ((conversationId: string, path: string) => Promise<Buffer>) | undefined
  /** Summarises a long conversation's oldest turns at a run's start. */
  compactor: Compactor
  /** Transcript windows kept for the next run of their conversation. */
  windows: WindowCache
  /** What one model answer may hold before the run fails `output_too_large`. */
  answerLimits: AnswerLimits
}
