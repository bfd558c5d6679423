import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import {
  ModelError,
  type LanguageModel,
  type ModelCapability,
  type ModelRequest,
  type StreamPart,
  type UpstreamLimits,
} from './model.js'
import type { ModelPricing } from './pricing.js'
import { DemoModel } from './scripted/demo-model.js'
import { ScriptedModel, type ScriptedTurn } from './scripted/scripted-model.js'

/** A model entry of the config file (docs/guides/agent-runs.md#models). */
export interface ModelSettings {
  id: string
  provider: 'openai' | 'anthropic' | 'scripted'
  model?: string
  baseUrl?: string
  apiKeyEnv?: string
  contextWindow?: number
  supportsTools?: boolean
  script?: string
  /** Defaults of every request to this model; a project's profile and a run may override them. */
  temperature?: number
  maxTokens?: number
  topP?: number
  stop?: string[]
  /** Extra request headers (e.g. a gateway's tenant header); never shown by the API. */
  headers?: Record<string, string>
  /** Price per million tokens, for the cost of its calls (none: cost null). */
  pricing?: ModelPricing
  /** Models that take a call over when this one fails upstream (docs/guides/agent-runs.md#model-fallback). */
  fallbacks?: string[]
  /** Retries of a failed call on this model before a fallback takes over (default 3). */
  retries?: number
  /** What it takes besides text: `vision` (images), `pdf` (PDF documents). Default: text only. */
  capabilities?: ModelCapability[]
}

/** How calls move between models: each model's fallbacks and own retries, by id. */
export interface FallbackSettings {
  fallbacks: ReadonlyMap<string, readonly string[]>
  retries: ReadonlyMap<string, number>
}

/**
 * Stands in for a model whose API key variable is unset: every run on it fails with
 * `upstream_auth_missing` instead of calling upstream without a key.
 */
export class MissingKeyModel implements LanguageModel {
  readonly provider: 'openai' | 'anthropic'
  readonly supportsTools: boolean
  readonly contextWindow: number

  constructor(
    readonly id: string,
    readonly apiKeyEnv: string,
    model: LanguageModel,
  ) {
    this.provider = model.provider === 'anthropic' ? 'anthropic' : 'openai'
    this.supportsTools = model.supportsTools
    this.contextWindow = model.contextWindow
  }

  // eslint-disable-next-line require-yield -- fails before anything streams
  async *stream(_request: ModelRequest): AsyncGenerator<StreamPart> {
    throw new ModelError(
      'upstream_auth_missing',
      `model ${this.id} has no API key: the environment variable ${this.apiKeyEnv} is not set on the server`,
    )
  }
}

/** Builds a provider adapter for a non-scripted model (registered by the composition root). */
export type ProviderFactory = (
  settings: ModelSettings,
  apiKey: string | undefined,
  options: UpstreamLimits,
) => LanguageModel

/** The configured models; with none configured, the scripted demo model. */
export class ModelRegistry {
  readonly #models = new Map<string, LanguageModel>()
  readonly defaultId: string

  readonly #prices: ReadonlyMap<string, ModelPricing>
  readonly #fallbacks: FallbackSettings

  /** `prices`: each model's price by id (`models[].pricing`); a model without one costs null. */
  constructor(
    models: LanguageModel[],
    defaultId?: string,
    prices: ReadonlyMap<string, ModelPricing> = new Map(),
    fallbacks: FallbackSettings = { fallbacks: new Map(), retries: new Map() },
  ) {
    this.#prices = prices
    this.#fallbacks = fallbacks
    for (const model of models) this.#models.set(model.id, model)
    if (this.#models.size === 0) {
      const demo = new DemoModel()
      this.#models.set(demo.id, demo)
    }
    this.defaultId = defaultId && this.#models.has(defaultId) ? defaultId : [...this.#models.keys()][0]!
  }

  get(id: string): LanguageModel | undefined {
    return this.#models.get(id)
  }

  list(): LanguageModel[] {
    return [...this.#models.values()]
  }

  priceOf(id: string): ModelPricing | undefined {
    return this.#prices.get(id)
  }

  /**
   * The model and those that take its calls over, in order: its fallbacks, each followed by theirs
   * (depth first, each model once; cycles are refused when the configuration is loaded).
   */
  chain(id: string): LanguageModel[] {
    const seen = new Set<string>()
    const out: LanguageModel[] = []
    const visit = (current: string): void => {
      if (seen.has(current)) return
      seen.add(current)
      const model = this.#models.get(current)
      if (!model) return
      out.push(model)
      for (const next of this.#fallbacks.fallbacks.get(current) ?? []) visit(next)
    }
    visit(id)
    return out
  }

  /** A model's own retries (`models[].retries`), if it sets them. */
  retriesOf(id: string): number | undefined {
    return this.#fallbacks.retries.get(id)
  }
}

/** Each configured model's fallbacks and retries, by id. */
export function fallbacksOf(settings: readonly ModelSettings[]): FallbackSettings {
  return {
    fallbacks: new Map(settings.flatMap((entry) => (entry.fallbacks ? [[entry.id, entry.fallbacks] as const] : []))),
    retries: new Map(
      settings.flatMap((entry) => (entry.retries !== undefined ? [[entry.id, entry.retries] as const] : [])),
    ),
  }
}

/** Problems with the models' fallbacks: unknown models, a model its own fallback, cycles. */
export function fallbackProblems(settings: ReadonlyArray<{ id?: unknown; fallbacks?: unknown }>): string[] {
  const problems: string[] = []
  const ids = new Set(settings.map((entry) => entry?.id).filter((id): id is string => typeof id === 'string'))
  const graph = new Map<string, string[]>()
  settings.forEach((entry, index) => {
    if (typeof entry?.id !== 'string' || !Array.isArray(entry.fallbacks)) return
    const targets = entry.fallbacks.filter((target): target is string => typeof target === 'string')
    for (const target of targets) {
      if (!ids.has(target)) problems.push(`models[${index}].fallbacks: no model with id ${JSON.stringify(target)}`)
      if (target === entry.id) problems.push(`models[${index}].fallbacks: ${entry.id} cannot be its own fallback`)
    }
    graph.set(entry.id, targets)
  })
  // A cycle: a model reached again while its own fallbacks are being walked.
  const state = new Map<string, 'walking' | 'done'>()
  const walk = (id: string, path: string[]): void => {
    if (state.get(id) === 'done') return
    if (state.get(id) === 'walking') {
      const cycle = [...path.slice(path.indexOf(id)), id]
      if (cycle.length > 2) problems.push(`models: fallbacks form a cycle (${cycle.join(' → ')})`)
      return
    }
    state.set(id, 'walking')
    for (const next of graph.get(id) ?? []) walk(next, [...path, id])
    state.set(id, 'done')
  }
  for (const id of graph.keys()) walk(id, [])
  return problems
}

/** Each configured model's price, by id. */
export function pricesOf(settings: readonly ModelSettings[]): Map<string, ModelPricing> {
  return new Map(settings.flatMap((entry) => (entry.pricing ? [[entry.id, entry.pricing] as const] : [])))
}

/** When some models have a price, the ones that have none (warned about at start: their cost is null). */
export function modelsWithoutPrice(settings: readonly ModelSettings[]): string[] {
  if (!settings.some((entry) => entry.pricing)) return []
  return settings.filter((entry) => !entry.pricing).map((entry) => entry.id)
}

/** The models whose `apiKeyEnv` names an unset variable (warned about at start). */
export function modelsMissingKeys(
  settings: readonly ModelSettings[],
  env: NodeJS.ProcessEnv,
): Array<{ id: string; apiKeyEnv: string }> {
  return settings
    .filter((entry) => entry.provider !== 'scripted' && entry.apiKeyEnv && !env[entry.apiKeyEnv])
    .map((entry) => ({ id: entry.id, apiKeyEnv: entry.apiKeyEnv! }))
}

/** Creates models from settings; API keys are read from the named environment variables only. */
export function createModels(
  settings: ModelSettings[],
  options: {
    cwd: string
    env: NodeJS.ProcessEnv
    providers: Partial<Record<'openai' | 'anthropic', ProviderFactory>>
    /** The bounds every upstream call of these models keeps to. */
    limits: UpstreamLimits
  },
): LanguageModel[] {
  return settings.map((entry) => {
    if (entry.provider === 'scripted') {
      const path = resolve(options.cwd, entry.script ?? '')
      const script = JSON.parse(readFileSync(path, 'utf8')) as
        { turns?: ScriptedTurn[]; turnBy?: 'call' | 'round' } | ScriptedTurn[]
      const turns = Array.isArray(script) ? script : (script.turns ?? [])
      const turnBy = Array.isArray(script) ? undefined : script.turnBy
      return new ScriptedModel({
        id: entry.id,
        turns,
        contextWindow: entry.contextWindow,
        supportsTools: entry.supportsTools,
        ...(entry.capabilities && { capabilities: entry.capabilities }),
        whenExhausted: 'loop',
        ...(turnBy && { turnBy }),
      })
    }
    const factory = options.providers[entry.provider]
    if (!factory) throw new Error(`model ${entry.id}: provider ${entry.provider} is not available`)
    const apiKey = entry.apiKeyEnv ? options.env[entry.apiKeyEnv] : undefined
    const model = factory(entry, apiKey, options.limits)
    return entry.apiKeyEnv && !apiKey ? new MissingKeyModel(entry.id, entry.apiKeyEnv, model) : model
  })
}
