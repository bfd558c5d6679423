/** Model providers: canonical types and adapters (OpenAI-compatible, Anthropic, scripted). */
export {
  ModelError,
  type LanguageModel,
  type ModelErrorCode,
  type ModelMessage,
  type ModelCapability,
  type UserContentPart,
  type DocumentPart,
  documentText,
  type ModelParams,
  type ModelRequest,
  type ModelTool,
  type ModelToolCall,
  type StreamPart,
  type Usage,
  type ToolParameters,
  type UpstreamLimits,
  defaultUpstreamLimits,
  type AnswerLimits,
  defaultAnswerLimits,
} from './model.js'
export { ScriptedModel, type ScriptedTurn, type ScriptedModelOptions } from './scripted/scripted-model.js'
export { DemoModel } from './scripted/demo-model.js'
export {
  ModelRegistry,
  createModels,
  modelsMissingKeys,
  modelsWithoutPrice,
  pricesOf,
  fallbacksOf,
  fallbackProblems,
  MissingKeyModel,
  type FallbackSettings,
  type ModelSettings,
  type ProviderFactory,
} from './model-registry.js'
export { OpenAIChatModel, type OpenAIChatModelOptions } from './openai/openai-chat-model.js'
export { AnthropicMessagesModel, type AnthropicMessagesModelOptions } from './anthropic/anthropic-messages-model.js'
export { defaultToolsUnsupportedKeywords } from './openai/upstream-errors.js'
export { costOf, type ModelPricing } from './pricing.js'
export { streamWithRetries, type RetryOptions } from './retry.js'
export { streamWithFallbacks, type FallbackOptions, type FallbackPart } from './fallback.js'
export { projectToolSchema, type ProjectedToolSchema } from './tool-schema.js'
