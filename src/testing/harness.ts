import type { CommandContext, JsonValue, PluginDefinition } from '../extension/index.js'
import { context, type ContextOptions } from './context.js'
import { copy, type MemoryKv } from './memory-kv.js'
import { createHost, type TestHost } from './test-host.js'
import { TestRegistry } from './test-registry.js'

type Params = { [key: string]: JsonValue }

/** A plugin set up against the stubs, with helpers to call its commands like the bus would. */
export interface Harness {
  registry: TestRegistry
  host: TestHost
  kv: MemoryKv
  /** A context over the plugin's kv (see `context`). */
  context(options?: ContextOptions): CommandContext
  /** Runs a command's handler; the result goes through JSON as it would on the wire. */
  dispatch(id: string, params?: Params, options?: ContextOptions): Promise<JsonValue>
  /** The command's confirmation-card text. */
  preview(id: string, params?: Params, options?: ContextOptions): Promise<string>
}

export async function setupPlugin(plugin: PluginDefinition): Promise<Harness> {
  const registry = new TestRegistry()
  const host = createHost()
  await plugin.setup(registry, host)
  const contextFor = (options?: ContextOptions) => context(host.kv, options)
  return {
    registry,
    host,
    kv: host.kv,
    context: contextFor,
    async dispatch(id, params = {}, options) {
      const result = await registry.command(id).handler(params, contextFor(options))
      return copy(result)
    },
    async preview(id, params = {}, options) {
      const { spec } = registry.command(id)
      if (!spec.preview) throw new Error(`command ${id} has no preview`)
      return spec.preview(params, contextFor(options))
    },
  }
}
