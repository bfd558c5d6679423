/** Model providers: canonical types and adapters (OpenAI-compatible, Anthropic, scripted). */
export { ModelError, type LanguageModel, type ModelErrorCode, type ModelMessage, type ModelRequest, type ModelTool, type ModelToolCall, type StreamPart, type Usage, type ToolParameters } from './model.js'
export { ScriptedModel, type ScriptedTurn, type ScriptedModelOptions } from './scripted/scripted-model.js'
export { DemoModel } from './scripted/demo-model.js'
export { ModelRegistry, createModels, type ModelSettings, type ProviderFactory } from './model-registry.js'
