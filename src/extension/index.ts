/**
 * The plugin surface of Plinth: the only module plugins import. It depends on nothing internal.
 *
 * @example
 * import { definePlugin } from 'plinth/extension'
 * export default definePlugin({
 *   name: 'hello', version: '1.0.0', surface: '^1.0.0',
 *   setup(registry) {
 *     registry.addCommand({ id: 'hello.greet', title: 'Greet', description: 'Says hello',
 *       paramsSchema: { type: 'object', properties: { name: { type: 'string' } } }, risk: 'low' },
 *       (params) => ({ greeting: `hello ${String(params.name ?? 'world')}` }))
 *   },
 * })
 */
import type { PluginDefinition } from './types.js'

/** The version of this surface. Adding bumps minor; changing or removing bumps major. */
export const SurfaceVersion = '1.8.0'

/** Declares a plugin; returns it unchanged (typed). */
export function definePlugin(definition: PluginDefinition): PluginDefinition {
  return definition
}

export { CommandError } from './command-error.js'
export { projectToolName } from './tool-name.js'
export type {
  Actor,
  CliCommandSpec,
  CliFlag,
  CliSubcommandSpec,
  CliToolSpec,
  CommandContext,
  CommandHandler,
  CommandSpec,
  Entrance,
  Host,
  JsonSchema,
  JsonValue,
  KnowledgeHit,
  KvStore,
  LogMethod,
  McpServerSpec,
  Options,
  ParamsOf,
  PluginDefinition,
  PluginEvent,
  PluginLogger,
  ProjectAction,
  ProjectAuthzAdapter,
  ProjectRef,
  Registry,
  ResourceAuthorizer,
  Risk,
  RiskClassifier,
  Skill,
} from './types.js'
