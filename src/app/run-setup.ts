import type { Logger } from 'pino'
import { createPluginLogger, type CommandBus } from '../cmdbus/index.js'
import {
  AnthropicMessagesModel,
  createModels,
  ModelRegistry,
  modelsMissingKeys,
  modelsWithoutPrice,
  pricesOf,
  fallbacksOf,
  type FallbackSettings,
  OpenAIChatModel,
  type LanguageModel,
  type ModelParams,
  type ModelPricing,
  type ModelSettings,
  type ProviderFactory,
} from '../llm/index.js'
import type { Retriever } from '../rag/index.js'
import {
  RunManager,
  type CompactionSettings,
  type RetentionSettings,
  type RunObserver,
  type RunQuota,
} from '../runmgr/index.js'
import type { RunBudget, Store } from '../store/index.js'

function requireBaseUrl(settings: ModelSettings): string {
  if (!settings.baseUrl) throw new Error(`model ${settings.id}: baseUrl is required for provider ${settings.provider}`)
  return settings.baseUrl.replace(/\/+$/, '')
}

/** The request defaults a model entry configures. */
function configuredParams(settings: ModelSettings): ModelParams {
  return {
    ...(settings.temperature !== undefined && { temperature: settings.temperature }),
    ...(settings.maxTokens !== undefined && { maxTokens: settings.maxTokens }),
    ...(settings.topP !== undefined && { topP: settings.topP }),
    ...(settings.stop !== undefined && { stop: settings.stop }),
  }
}

/** Provider adapters by name. */
export const providerFactories: Partial<Record<'openai' | 'anthropic', ProviderFactory>> = {
  openai: (settings, apiKey, limits) =>
    new OpenAIChatModel({
      id: settings.id,
      model: settings.model ?? settings.id,
      baseUrl: requireBaseUrl(settings),
      ...(apiKey && { apiKey }),
      contextWindow: settings.contextWindow ?? 128_000,
      supportsTools: settings.supportsTools ?? true,
      ...(settings.capabilities && { capabilities: settings.capabilities }),
      ...limits,
      params: configuredParams(settings),
      ...(settings.headers && { headers: settings.headers }),
    }),
  anthropic: (settings, apiKey, limits) =>
    new AnthropicMessagesModel({
      id: settings.id,
      model: settings.model ?? settings.id,
      baseUrl: requireBaseUrl(settings),
      ...(apiKey && { apiKey }),
      contextWindow: settings.contextWindow ?? 200_000,
      supportsTools: settings.supportsTools ?? true,
      ...(settings.capabilities && { capabilities: settings.capabilities }),
      ...limits,
      params: configuredParams(settings),
      ...(settings.headers && { headers: settings.headers }),
    }),
}

/** The configured models (the scripted demo model when none) and the run manager over them. */
export async function setUpRuns(
  store: Store,
  bus: CommandBus,
  options: {
    models: ModelSettings[] | LanguageModel[]
    /** Prices of prebuilt models (configured ones carry theirs in `pricing`). */
    prices?: ReadonlyMap<string, ModelPricing>
    /** Fallbacks and retries of prebuilt models (configured ones carry theirs in `fallbacks` and `retries`). */
    fallbacks?: FallbackSettings
    defaultModel?: string
    logger: Logger
    cwd?: string
    toolOutputLimit?: number
    leaseMs?: number
    actionTtlMs?: number
    llmIdleTimeoutMs?: number
    llmCallTimeoutMs?: number
    llmMaxAnswerBytes?: number
    llmMaxOutputChars?: number
    llmMaxToolCalls?: number
    observer?: RunObserver
    llmConcurrency?: number
    llmConcurrencyPerUser?: number
    maxActiveRunsPerUser?: number
    runQuota?: RunQuota
    maxResumes?: number
    shutdownGraceMs?: number
    retriever?: Retriever
    runBudget?: RunBudget
    retention?: RetentionSettings
    compaction?: Partial<CompactionSettings>
    auditKey?: string
    discardWorkDir?: (conversationId: string) => Promise<void>
    evictWorkCaches?: () => Promise<number>
    readFile?: (conversationId: string, path: string) => Promise<Buffer>
  },
): Promise<RunManager> {
  const prebuilt = options.models.length > 0 && 'stream' in (options.models[0] as object)
  if (!prebuilt) {
    for (const missing of modelsMissingKeys(options.models as ModelSettings[], process.env)) {
      options.logger.warn(
        missing,
        `model ${missing.id}: ${missing.apiKeyEnv} is not set; its runs will fail with upstream_auth_missing`,
      )
    }
    const unpriced = modelsWithoutPrice(options.models as ModelSettings[])
    if (unpriced.length > 0)
      options.logger.warn(
        { models: unpriced },
        `model${unpriced.length === 1 ? '' : 's'} ${unpriced.join(', ')} ha${unpriced.length === 1 ? 's' : 've'} no pricing: the cost of ${unpriced.length === 1 ? 'its' : 'their'} calls is null`,
      )
  }
  const prices = prebuilt ? (options.prices ?? new Map()) : pricesOf(options.models as ModelSettings[])
  const models = prebuilt
    ? (options.models as LanguageModel[])
    : createModels(options.models as ModelSettings[], {
        cwd: options.cwd ?? process.cwd(),
        env: process.env,
        providers: providerFactories,
        limits: {
          ...(options.llmIdleTimeoutMs !== undefined && { idleTimeoutMs: options.llmIdleTimeoutMs }),
          ...(options.llmCallTimeoutMs !== undefined && { callTimeoutMs: options.llmCallTimeoutMs }),
          ...(options.llmMaxAnswerBytes !== undefined && { maxAnswerBytes: options.llmMaxAnswerBytes }),
        },
      })
  const runs = new RunManager({
    store,
    bus,
    models: new ModelRegistry(
      models,
      options.defaultModel,
      prices,
      prebuilt ? options.fallbacks : fallbacksOf(options.models as ModelSettings[]),
    ),
    log: createPluginLogger(options.logger, 'runmgr'),
    ...(options.toolOutputLimit !== undefined && { toolOutputLimit: options.toolOutputLimit }),
    ...(options.leaseMs !== undefined && { leaseMs: options.leaseMs }),
    ...(options.actionTtlMs !== undefined && { actionTtlMs: options.actionTtlMs }),
    ...(options.observer && { observer: options.observer }),
    ...(options.llmConcurrency !== undefined && { maxConcurrentModelCalls: options.llmConcurrency }),
    ...(options.llmConcurrencyPerUser !== undefined && {
      maxConcurrentModelCallsPerUser: options.llmConcurrencyPerUser,
    }),
    ...(options.maxActiveRunsPerUser !== undefined && { maxActiveRunsPerUser: options.maxActiveRunsPerUser }),
    answerLimits: {
      ...(options.llmMaxOutputChars !== undefined && { maxOutputChars: options.llmMaxOutputChars }),
      ...(options.llmMaxToolCalls !== undefined && { maxToolCalls: options.llmMaxToolCalls }),
    },
    ...(options.runQuota && { runQuota: options.runQuota }),
    ...(options.retriever && { retriever: options.retriever }),
    ...(options.runBudget && { runBudget: options.runBudget }),
    ...(options.retention && { retention: options.retention }),
    ...(options.compaction && { compaction: options.compaction }),
    ...(options.auditKey && { auditKey: options.auditKey }),
    ...(options.discardWorkDir && { discardWorkDir: options.discardWorkDir }),
    ...(options.evictWorkCaches && { evictWorkCaches: options.evictWorkCaches }),
    ...(options.readFile && { readFile: options.readFile }),
    ...(options.maxResumes !== undefined && { maxResumes: options.maxResumes }),
    ...(options.shutdownGraceMs !== undefined && { shutdownGraceMs: options.shutdownGraceMs }),
    // Embedded PGlite belongs to this process: a running run found at start is an orphan.
    exclusiveDatabase: store.engine === 'pglite',
  })
  await runs.start()
  return runs
}
