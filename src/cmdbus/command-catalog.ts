import { Ajv, type ValidateFunction } from 'ajv'
import addFormatsModule from 'ajv-formats'
import type {
  CliToolSpec,
  McpServerSpec,
  CommandContext,
  CommandHandler,
  CommandSpec,
  JsonValue,
  ProjectAuthzAdapter,
  Registry,
  ResourceAuthorizer,
  Risk,
  Skill,
} from '../extension/index.js'
import { validateCliSpec } from '../exec/index.js'
import { commandIdPattern, projectToolName, toolNamePattern } from './tool-name.js'
import type { MatchedRule } from './risk-rules.js'

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv

type Params = { [key: string]: JsonValue }

/** A command as the bus holds it. */
export interface RegisteredCommand {
  spec: CommandSpec<Params>
  handler: CommandHandler<Params>
  plugin: string
  pluginVersion: string
  /** The tool name the model sees (exposed commands only). */
  toolName: string | null
  validate: ValidateFunction
  /** Core only: whether a call must be confirmed, decided per call (e.g. exec tools under `direct`). */
  confirmWhen?: (params: Params) => boolean
  /** Core only: the text the model reads of a result (default: the result as JSON). */
  modelText?: (result: JsonValue) => string
  /** Core only: whether the command can work now; when not, the model is not offered it as a tool. */
  availableWhen?: () => boolean
  /** Core and mounted: it works in a conversation's work directory, so it is not offered where there is none (MCP outside a conversation). */
  needsConversation?: boolean
  /**
   * Core and mounted: a refusal the call earns whatever happens (a path that leads out, no sandbox),
   * checked with the schema, before the gate: no one is asked to approve a call that can only fail.
   */
  precheck?: (params: Params) => { code: string; message: string } | null
  /** Core only: the high-risk rules these params match (a shell line's), named in `tool_call.created` and the decision's reasons. */
  rulesWhen?: (params: Params) => MatchedRule[]
  /** Core only: the users (names or ids) who alone may approve a call now — a second person — or null. */
  approversWhen?: () => readonly string[] | null
  /** Core only: the levels a classifier can answer now (the catalog shows them; default low…high). */
  riskRangeWhen?: () => readonly [Risk, Risk]
  /** Mounted commands: what the audit envelope records of where the command comes from (e.g. `mcp`). */
  origin?: { [key: string]: JsonValue }
  /** Mounted commands: why this user must first connect an account (a `connect` decision), or null. */
  connectionWhen?: (userId: string) => Promise<string | null>
}

/** A command a mount (an MCP server) provides, with the hooks core commands may set. */
export interface MountedCommand extends Pick<
  RegisteredCommand,
  'modelText' | 'availableWhen' | 'origin' | 'connectionWhen' | 'needsConversation' | 'precheck'
> {
  spec: CommandSpec<Params>
  handler: CommandHandler<Params>
}

/** Whether every call of the command must be confirmed, whatever the mode or allowances. */
export function alwaysAsks(command: RegisteredCommand, params: Params): boolean {
  return command.confirmWhen ? command.confirmWhen(params) : command.spec.confirm === true
}

/**
 * How a command's risk appears in the catalog: its level, or `varies` with the range a classifier can
 * answer (a plugin's classifier: low…high). A call is always shown the evaluated level.
 */
export function catalogRisk(command: RegisteredCommand): {
  risk: Risk | 'varies'
  riskRange: { min: Risk; max: Risk } | null
} {
  if (typeof command.spec.risk === 'string') return { risk: command.spec.risk, riskRange: null }
  const [min, max] = command.riskRangeWhen?.() ?? (['low', 'high'] as const)
  return min === max ? { risk: min, riskRange: null } : { risk: 'varies', riskRange: { min, max } }
}

/** What core commands' handlers may read beyond the plugin surface's CommandContext. */
export interface CoreContext extends CommandContext {
  readonly dispatchId: string
  /** The run's id for the tool call (agent entrance), else null. */
  readonly callId: string | null
}

/** Raised when a plugin's registrations are refused; the plugin is then not loaded at all. */
export class RegistrationError extends Error {}

/**
 * Everything plugins (and core) registered: commands, skills, notes, authorizers and the one
 * ProjectAuthz adapter. Registration is staged per plugin and committed only if all of it is valid.
 */
export class CommandCatalog {
  readonly #commands = new Map<string, RegisteredCommand>()
  readonly #toolNames = new Map<string, string>()
  readonly #skills: Skill[] = []
  readonly #notes: string[] = []
  readonly #authorizers = new Map<string, ResourceAuthorizer>()
  readonly #cliTools: Array<{ plugin: string; pluginVersion: string; spec: CliToolSpec }> = []
  readonly #mcpServers: Array<{ plugin: string; spec: McpServerSpec }> = []
  /** Problems of an MCP server a plugin declares (the configuration's own checks); none: accepted. */
  readonly #checkMcpServer: (spec: McpServerSpec) => string[]

  constructor(options: { checkMcpServer?: (spec: McpServerSpec) => string[] } = {}) {
    this.#checkMcpServer = options.checkMcpServer ?? (() => [])
  }
  #projectAuthz: { plugin: string; adapter: ProjectAuthzAdapter } | null = null
  readonly #pending = new Set<() => Promise<void>>()
  readonly #listeners = new Set<(plugin: string) => void>()
  readonly #ajv = addFormats(new Ajv({ allErrors: true, strict: false, useDefaults: true, coerceTypes: false }))

  /**
   * A Registry for one plugin. Call `commit()` after its setup resolved; nothing is visible before.
   * With `namespaces`, a command id must start with one of them.
   */
  stage(
    plugin: string,
    pluginVersion: string,
    options: { namespaces?: readonly string[] } = {},
  ): { registry: Registry; commit(): void } {
    const commands: RegisteredCommand[] = []
    const skills: Skill[] = []
    const notes: string[] = []
    const authorizers = new Map<string, ResourceAuthorizer>()
    const cliTools: CliToolSpec[] = []
    const mcpServers: McpServerSpec[] = []
    let projectAuthz: ProjectAuthzAdapter | null = null
    const registry: Registry = {
      addCommand: (spec: CommandSpec<never>, handler: CommandHandler<never>) => {
        commands.push(
          this.#prepare(
            spec as unknown as CommandSpec<Params>,
            handler as unknown as CommandHandler<Params>,
            plugin,
            pluginVersion,
            commands,
            options.namespaces,
          ),
        )
      },
      addSkill: (skill) => {
        if (!skill.name || !skill.instructions) throw new RegistrationError('a skill needs a name and instructions')
        skills.push(skill)
      },
      note: (text) => {
        if (typeof text === 'string' && text.trim()) notes.push(text.trim())
      },
      registerResourceAuthorizer: (kind, authorizer) => {
        if (this.#authorizers.has(kind) || authorizers.has(kind))
          throw new RegistrationError(`resource kind ${kind} already has an authorizer`)
        authorizers.set(kind, authorizer)
      },
      registerProjectAuthz: (adapter) => {
        if (this.#projectAuthz || projectAuthz) {
          throw new RegistrationError(
            `a ProjectAuthz adapter is already registered${this.#projectAuthz ? ` by ${this.#projectAuthz.plugin}` : ''}`,
          )
        }
        projectAuthz = adapter
      },
      addCliTool: (spec) => {
        const problem = validateCliSpec(spec)
        if (problem) throw new RegistrationError(problem)
        if (
          this.#cliTools.some((tool) => tool.spec.name === spec.name) ||
          cliTools.some((tool) => tool.name === spec.name)
        ) {
          throw new RegistrationError(`CLI tool ${spec.name} is already registered`)
        }
        cliTools.push(spec)
      },
      addMcpServer: (spec) => {
        const problems = this.#checkMcpServer(spec)
        if (problems.length > 0)
          throw new RegistrationError(`MCP server ${JSON.stringify(spec?.name)}: ${problems.join('; ')}`)
        if (
          this.#mcpServers.some((server) => server.spec.name === spec.name) ||
          mcpServers.some((server) => server.name === spec.name)
        ) {
          throw new RegistrationError(`MCP server ${spec.name} is already registered`)
        }
        mcpServers.push(spec)
      },
    }
    return {
      registry,
      commit: () => {
        for (const command of commands) {
          this.#commands.set(command.spec.id, command)
          if (command.toolName) this.#toolNames.set(command.toolName, command.spec.id)
        }
        this.#skills.push(...skills)
        this.#notes.push(...notes)
        for (const [kind, authorizer] of authorizers) this.#authorizers.set(kind, authorizer)
        if (projectAuthz) this.#projectAuthz = { plugin, adapter: projectAuthz }
        for (const spec of cliTools) this.#cliTools.push({ plugin, pluginVersion, spec })
        for (const spec of mcpServers) this.#mcpServers.push({ plugin, spec })
      },
    }
  }

  /**
   * Replaces every command `plugin` mounted (an MCP server's tools, whose list changes at run time).
   * Each command is checked as a plugin's would be; one that is refused (a malformed schema, an id or
   * tool name another command has) is left out with its reason, and the rest are mounted.
   */
  mount(
    plugin: string,
    pluginVersion: string,
    commands: readonly MountedCommand[],
    namespace: string,
  ): { mounted: string[]; refused: Array<{ id: string; reason: string }> } {
    this.unmount(plugin, { quiet: true })
    const staged: RegisteredCommand[] = []
    const refused: Array<{ id: string; reason: string }> = []
    for (const { spec, handler, ...hooks } of commands) {
      try {
        const prefix = `${namespace}.`
        if (!spec.id.startsWith(prefix)) throw new RegistrationError(`command ${spec.id} is outside ${namespace}`)
        staged.push(Object.assign(this.#prepare(spec, handler, plugin, pluginVersion, staged), hooks))
      } catch (error) {
        refused.push({ id: spec.id, reason: (error as Error).message })
      }
    }
    for (const command of staged) {
      this.#commands.set(command.spec.id, command)
      if (command.toolName) this.#toolNames.set(command.toolName, command.spec.id)
    }
    this.#changed(plugin)
    return { mounted: staged.map((command) => command.spec.id), refused }
  }

  /** Removes what `plugin` mounted. */
  unmount(plugin: string, options: { quiet?: boolean } = {}): void {
    let removed = false
    for (const [id, command] of this.#commands) {
      if (command.plugin !== plugin) continue
      this.#commands.delete(id)
      // Mounts come and go: their compiled schemas must not pile up in the validator.
      this.#ajv.removeSchema(command.spec.paramsSchema)
      if (command.toolName) this.#toolNames.delete(command.toolName)
      removed = true
    }
    if (removed && !options.quiet) this.#changed(plugin)
  }

  /** Called with the plugin whose mounted commands changed. */
  onChange(listener: (plugin: string) => void): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  /**
   * A source of commands that arrive later (an MCP server is started when first needed): `settled()`
   * starts it and waits for its first answer.
   */
  addPending(source: () => Promise<void>): void {
    this.#pending.add(source)
  }

  /** Resolves once every pending source has mounted what it has (or given up); at once when none. */
  settled(): Promise<void> {
    if (this.#pending.size === 0) return Promise.resolve()
    // A source that fails has mounted nothing; the catalog is still usable.
    return Promise.allSettled([...this.#pending].map((source) => source())).then(() => undefined)
  }

  #changed(plugin: string): void {
    for (const listener of this.#listeners) listener(plugin)
  }

  get(commandId: string): RegisteredCommand | undefined {
    return this.#commands.get(commandId)
  }

  /** Exact lookup of a model's tool name; names are never parsed back into ids. */
  byToolName(toolName: string): RegisteredCommand | undefined {
    const id = this.#toolNames.get(toolName)
    return id === undefined ? undefined : this.#commands.get(id)
  }

  list(): RegisteredCommand[] {
    return [...this.#commands.values()].sort((a, b) => a.spec.id.localeCompare(b.spec.id))
  }

  get skills(): readonly Skill[] {
    return this.#skills
  }

  get notes(): readonly string[] {
    return this.#notes
  }

  authorizer(kind: string): ResourceAuthorizer | undefined {
    return this.#authorizers.get(kind)
  }

  /** CLI tools plugins declared; they become commands once probed (see registerCliTools). */
  get cliTools(): ReadonlyArray<{ plugin: string; pluginVersion: string; spec: CliToolSpec }> {
    return this.#cliTools
  }

  /** The MCP servers plugins ship (`addMcpServer`), for the MCP hub to mount. */
  get mcpServers(): ReadonlyArray<{ plugin: string; spec: McpServerSpec }> {
    return this.#mcpServers
  }

  /** Core commands only: a per-call confirmation, the model's view of results, availability. */
  setCoreHooks(
    commandId: string,
    hooks: Pick<
      RegisteredCommand,
      | 'confirmWhen'
      | 'modelText'
      | 'availableWhen'
      | 'approversWhen'
      | 'riskRangeWhen'
      | 'needsConversation'
      | 'precheck'
      | 'rulesWhen'
    >,
  ): void {
    const command = this.#commands.get(commandId)
    if (command) Object.assign(command, hooks)
  }

  get projectAuthz(): ProjectAuthzAdapter | null {
    return this.#projectAuthz?.adapter ?? null
  }

  #prepare(
    spec: CommandSpec<Params>,
    handler: CommandHandler<Params>,
    plugin: string,
    pluginVersion: string,
    staged: RegisteredCommand[],
    namespaces?: readonly string[],
  ): RegisteredCommand {
    if (!spec || typeof spec.id !== 'string' || !commandIdPattern.test(spec.id)) {
      throw new RegistrationError(
        `malformed command id ${JSON.stringify(spec?.id)}: ids are lowercase dotted snake segments like "rdm.draft.compose"`,
      )
    }
    const namespace = spec.id.split('.')[0] ?? ''
    if (namespaces && !namespaces.includes(namespace)) {
      const own = namespaces.length === 1 ? `namespace ${namespaces[0]}` : `namespaces ${namespaces.join(', ')}`
      throw new RegistrationError(
        `command ${spec.id} is outside the plugin's ${own} (a command id starts with the plugin's name or a namespace declared in definePlugin's "namespaces")`,
      )
    }
    if (this.#commands.has(spec.id) || staged.some((command) => command.spec.id === spec.id)) {
      throw new RegistrationError(`command ${spec.id} is already registered`)
    }
    if (typeof handler !== 'function') throw new RegistrationError(`command ${spec.id} has no handler`)
    if (!spec.paramsSchema || spec.paramsSchema.type !== 'object')
      throw new RegistrationError(`command ${spec.id}: paramsSchema must be a JSON Schema with type "object"`)
    if (typeof spec.risk !== 'function' && !['low', 'medium', 'high'].includes(spec.risk))
      throw new RegistrationError(`command ${spec.id}: risk must be low, medium, high or a classifier`)
    let validate: ValidateFunction
    try {
      validate = this.#ajv.compile(spec.paramsSchema)
    } catch (error) {
      throw new RegistrationError(`command ${spec.id}: paramsSchema does not compile: ${(error as Error).message}`)
    }
    let toolName: string | null = null
    if (spec.exposeAsTool) {
      toolName = spec.exposeAsTool.name ?? projectToolName(spec.id)
      if (!toolNamePattern.test(toolName))
        throw new RegistrationError(
          `command ${spec.id}: tool name ${JSON.stringify(toolName)} must match ${toolNamePattern.source}`,
        )
      const clash = this.#toolNames.get(toolName) ?? staged.find((command) => command.toolName === toolName)?.spec.id
      if (clash) throw new RegistrationError(`command ${spec.id}: tool name ${toolName} collides with ${clash}`)
    }
    return { spec, handler, plugin, pluginVersion, toolName, validate }
  }
}
