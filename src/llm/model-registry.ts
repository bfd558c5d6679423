import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import type { LanguageModel } from './model.js'
import { DemoModel } from './scripted/demo-model.js'
import { ScriptedModel, type ScriptedTurn } from './scripted/scripted-model.js'

/** A model entry of the config file (SPEC §13). */
export interface ModelSettings {
  id: string
  provider: 'openai' | 'anthropic' | 'scripted'
  model?: string
  baseUrl?: string
  apiKeyEnv?: string
  contextWindow?: number
  supportsTools?: boolean
  script?: string
}

/** Builds a provider adapter for a non-scripted model (registered by the composition root). */
export type ProviderFactory = (settings: ModelSettings, apiKey: string | undefined, options: { idleTimeoutMs: number }) => LanguageModel

/** The configured models; with none configured, the scripted demo model. */
export class ModelRegistry {
  readonly #models = new Map<string, LanguageModel>()
  readonly defaultId: string

  constructor(models: LanguageModel[], defaultId?: string) {
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
}

/** Creates models from settings; API keys are read from the named environment variables only. */
export function createModels(
  settings: ModelSettings[],
  options: { cwd: string; env: NodeJS.ProcessEnv; providers: Partial<Record<'openai' | 'anthropic', ProviderFactory>>; idleTimeoutMs: number },
): LanguageModel[] {
  return settings.map((entry) => {
    if (entry.provider === 'scripted') {
      const path = resolve(options.cwd, entry.script ?? '')
      const script = JSON.parse(readFileSync(path, 'utf8')) as { turns?: ScriptedTurn[] } | ScriptedTurn[]
      const turns = Array.isArray(script) ? script : (script.turns ?? [])
      return new ScriptedModel({ id: entry.id, turns, contextWindow: entry.contextWindow, supportsTools: entry.supportsTools, whenExhausted: 'loop' })
    }
    const factory = options.providers[entry.provider]
    if (!factory) throw new Error(`model ${entry.id}: provider ${entry.provider} is not available`)
    return factory(entry, entry.apiKeyEnv ? options.env[entry.apiKeyEnv] : undefined, { idleTimeoutMs: options.idleTimeoutMs })
  })
}
