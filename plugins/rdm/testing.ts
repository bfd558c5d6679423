/**
 * A tiny in-memory stand-in for Plinth, for testing a plugin without the server: a KvStore, a
 * Registry that collects what the plugin registers, a Host stub and a CommandContext builder.
 * Written only against the extension surface; copy it into your own plugin to test it the same way.
 *
 * @example
 * const harness = await setupPlugin(plugin)
 * const result = await harness.dispatch('rdm.ping', { target: 'x' })
 */
import type {
  Actor,
  CliToolSpec,
  CommandContext,
  CommandHandler,
  CommandSpec,
  Host,
  JsonValue,
  KnowledgeHit,
  KvStore,
  PluginDefinition,
  PluginEvent,
  PluginLogger,
  ProjectAuthzAdapter,
  ProjectRef,
  Registry,
  ResourceAuthorizer,
  Skill,
} from '../../src/extension/index.js'

type Params = { [key: string]: JsonValue }

/** A JSON round trip: what a real store hands back is never the object that was stored. */
function copy<T extends JsonValue>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T
}

/** An in-memory KvStore with the real one's semantics: JSON values, copies in and out, `list` in key order. */
export class MemoryKv implements KvStore {
  readonly entries = new Map<string, JsonValue>()

  async get<T extends JsonValue = JsonValue>(key: string): Promise<T | undefined> {
    const value = this.entries.get(key)
    return value === undefined ? undefined : (copy(value) as T)
  }

  async set(key: string, value: JsonValue): Promise<void> {
    this.entries.set(key, copy(value))
  }

  async delete(key: string): Promise<void> {
    this.entries.delete(key)
  }

  async list(prefix = ''): Promise<Array<{ key: string; value: JsonValue }>> {
    return [...this.entries.keys()]
      .filter((key) => key.startsWith(prefix))
      .sort()
      .map((key) => ({ key, value: copy(this.entries.get(key) as JsonValue) }))
  }
}

/** One line a plugin logged. */
export interface LogLine {
  level: 'debug' | 'info' | 'warn' | 'error'
  message: string
  fields: Record<string, unknown>
}

/** A PluginLogger that keeps every line in `lines`. */
export function memoryLogger(): PluginLogger & { lines: LogLine[] } {
  const lines: LogLine[] = []
  const at = (level: LogLine['level']) => (message: string, fields: Record<string, unknown> = {}) => {
    lines.push({ level, message, fields })
  }
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }
}

/** A command as the test registry holds it. */
export interface CollectedCommand {
  spec: CommandSpec<Params>
  handler: CommandHandler<Params>
}

/** A Registry that only collects; a duplicate command id or a second ProjectAuthz adapter throws, as in Plinth. */
export class TestRegistry implements Registry {
  readonly commands = new Map<string, CollectedCommand>()
  readonly skills: Skill[] = []
  readonly notes: string[] = []
  readonly authorizers = new Map<string, ResourceAuthorizer>()
  readonly cliTools: CliToolSpec[] = []
  projectAuthz: ProjectAuthzAdapter | null = null

  addCommand<P = Params>(spec: CommandSpec<P>, handler: CommandHandler<P>): void {
    if (this.commands.has(spec.id)) throw new Error(`command ${spec.id} is already registered`)
    this.commands.set(spec.id, { spec: spec as unknown as CommandSpec<Params>, handler: handler as unknown as CommandHandler<Params> })
  }

  addSkill(skill: Skill): void {
    this.skills.push(skill)
  }

  note(text: string): void {
    this.notes.push(text)
  }

  registerResourceAuthorizer(kind: string, authorizer: ResourceAuthorizer): void {
    if (this.authorizers.has(kind)) throw new Error(`resource kind ${kind} already has an authorizer`)
    this.authorizers.set(kind, authorizer)
  }

  registerProjectAuthz(adapter: ProjectAuthzAdapter): void {
    if (this.projectAuthz) throw new Error('a ProjectAuthz adapter is already registered')
    this.projectAuthz = adapter
  }

  addCliTool(spec: CliToolSpec): void {
    if (this.cliTools.some((tool) => tool.name === spec.name)) throw new Error(`CLI tool ${spec.name} is already registered`)
    this.cliTools.push(spec)
  }

  /** The registered command, or an error naming the ones that exist. */
  command(id: string): CollectedCommand {
    const command = this.commands.get(id)
    if (!command) throw new Error(`no command ${id}; registered: ${[...this.commands.keys()].join(', ')}`)
    return command
  }
}

/** A Host stub: kv and log in memory, `audit`, `emit`, `accessChanged` and `addKnowledge` recorded, `knowledgeSearch` answering `hits`. */
export interface TestHost extends Host {
  kv: MemoryKv
  log: PluginLogger & { lines: LogLine[] }
  audited: Array<{ action: string; data: { [key: string]: JsonValue } }>
  emitted: PluginEvent[]
  /** Project ids passed to `accessChanged` (`null`: every project). */
  accessChanges: Array<string | null>
  /** Items added with `addKnowledge`, with the id each was given. */
  knowledge: Array<{ itemId: string; actor: Actor; projectId: string; title: string; text: string }>
  hits: KnowledgeHit[]
}

export function createHost(kv: MemoryKv = new MemoryKv()): TestHost {
  const host: TestHost = {
    kv,
    log: memoryLogger(),
    audited: [],
    emitted: [],
    accessChanges: [],
    knowledge: [],
    hits: [],
    options: { execBackend: 'direct', disableExecTools: false },
    async audit(action, data) {
      host.audited.push({ action, data: copy(data) })
    },
    async emit(event) {
      host.emitted.push(event)
    },
    async accessChanged(projectId) {
      host.accessChanges.push(projectId ?? null)
    },
    async addKnowledge(actor, item) {
      const itemId = `kn_${host.knowledge.length + 1}`
      host.knowledge.push({ itemId, actor, ...item })
      return { itemId }
    },
    async knowledgeSearch(_actor, _query, options) {
      return host.hits.filter((hit) => !options?.projectId || hit.projectId === options.projectId).slice(0, options?.k ?? 10)
    },
  }
  return host
}

/** The project `context()` uses unless told otherwise. */
export const defaultProject: ProjectRef = { id: 'prj_1', ownerId: 'usr_owner', name: 'Demo project' }

/** What `context()` may be told; `user` is a shortcut for a user actor with that id. */
export interface ContextOptions extends Partial<CommandContext> {
  user?: string
}

/**
 * A CommandContext: by default the owner of `defaultProject`, clicking a button in it. Pass `user`
 * for another person, `actor` for the agent, `project: null` for a dispatch outside any project.
 */
export function context(kv: KvStore, options: ContextOptions = {}): CommandContext {
  const { user, ...rest } = options
  const actor: Actor = user === undefined ? { type: 'user', id: defaultProject.ownerId, onBehalfOf: defaultProject.ownerId } : { type: 'user', id: user, onBehalfOf: user }
  return {
    actor,
    entrance: 'button',
    project: defaultProject,
    conversationId: null,
    runId: null,
    signal: new AbortController().signal,
    kv,
    log: memoryLogger(),
    ...rest,
  }
}

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
