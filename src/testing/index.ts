/**
 * Plinth's offline test kit for plugins (`plinth/testing`): an in-memory KvStore, a Registry that
 * collects what a plugin registers, a Host stub, a CommandContext builder, a harness that sets a plugin
 * up and calls its commands like the bus would, and a scripted model that plays tool calls against the
 * plugin's exposed commands. Written only against the extension surface; no database, no server.
 *
 * @example
 * import { setupPlugin, runScriptedAgent } from 'plinth/testing'
 * import plugin from './index.js'
 * const harness = await setupPlugin(plugin)
 * await harness.dispatch('hello.greet', { name: 'Ada' })            // → { greeting: 'hello Ada' }
 * const { steps } = await runScriptedAgent(harness, [{ toolCalls: [{ name: 'hello__greet', arguments: { name: 'Ada' } }] }])
 */
export { MemoryKv, copy } from './memory-kv.js'
export { memoryLogger, type LogLine } from './memory-logger.js'
export { TestRegistry, type CollectedCommand } from './test-registry.js'
export { createHost, type TestHost } from './test-host.js'
export { context, defaultProject, type ContextOptions } from './context.js'
export { setupPlugin, type Harness } from './harness.js'
export {
  offeredTools,
  runScriptedAgent,
  type AgentStep,
  type OfferedTool,
  type ScriptedAgentOptions,
  type ScriptedAgentResult,
  type ScriptedCall,
  type ScriptedTurn,
} from './scripted-agent.js'
