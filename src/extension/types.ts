/**
 * Types of the plugin surface. Everything here is data shapes and interfaces: the surface imports
 * nothing from the rest of Plinth, so plugins depend on it alone (and on json-schema-to-ts, for types).
 */
import type { FromSchema, JSONSchema } from 'json-schema-to-ts'

/** Any JSON value. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue }

/** A JSON Schema (draft 2020-12 subset ajv understands). Mark secret fields with `"x-sensitive": true`. */
export type JsonSchema = { [keyword: string]: unknown }

/** How dangerous a command is; decides whether a human must confirm (see the permission modes). */
export type Risk = 'low' | 'medium' | 'high'

/**
 * Where a dispatch comes from. `agent` is the model's own tool call; `mcp` is a call from an MCP
 * client through `/mcp` (since surface 1.5.0), for the user whose token it sends; `schedule` is a
 * scheduled firing, for the schedule's creator (since surface 1.7.0); the others are humans.
 */
export type Entrance = 'button' | 'card' | 'slash' | 'chat' | 'agent' | 'mcp' | 'schedule'

/** What an actor wants to do with a project, as asked of a ProjectAuthz adapter. */
export type ProjectAction = 'read' | 'search' | 'create_conversation' | 'write'

/**
 * Who dispatches: a user, the agent acting for a user (`onBehalfOf`), or a schedule firing for its
 * creator (`id` the schedule's). For a user, `onBehalfOf === id`.
 */
export interface Actor {
  type: 'user' | 'agent' | 'schedule'
  id: string
  onBehalfOf: string
}

/** A plugin's namespaced JSON key-value store. */
export interface KvStore {
  get<T extends JsonValue = JsonValue>(key: string): Promise<T | undefined>
  set(key: string, value: JsonValue): Promise<void>
  delete(key: string): Promise<void>
  /** Entries whose key starts with `prefix`, in key order. */
  list(prefix?: string): Promise<Array<{ key: string; value: JsonValue }>>
  /**
   * Reads the value and writes what `change` makes of it, as one step no other update of the key (on
   * any instance) comes between: concurrent read-then-set would lose one of two changes. `change`
   * gets the current value (undefined when there is none) and returns the new one, or undefined to
   * delete the key; it runs while the key is held, so it must be quick and must not touch the store.
   * Resolves to what was stored. Since surface 1.8.0.
   */
  update<T extends JsonValue = JsonValue>(
    key: string,
    change: (current: T | undefined) => JsonValue | undefined,
  ): Promise<JsonValue | undefined>
}

/**
 * One log level. Both argument orders work (since surface 1.4.0): pino's `(fields, message)` and
 * `(message, fields)`.
 */
export interface LogMethod {
  (fields: Record<string, unknown>, message?: string): void
  (message: string, fields?: Record<string, unknown>): void
}

/** Structured logging bound to the plugin (`plugin` is added to every line). */
export interface PluginLogger {
  debug: LogMethod
  info: LogMethod
  warn: LogMethod
  error: LogMethod
}

/** An event a plugin publishes to a project or conversation stream (type is prefixed `plugin.<name>.`). */
export interface PluginEvent {
  type: string
  projectId: string
  conversationId?: string
  data: { [key: string]: JsonValue }
}

/** One hit of knowledge retrieval. */
export interface KnowledgeHit {
  itemId: string
  chunkId: string
  projectId: string
  title: string
  /** The heading path of the chunk's section (`A > B`), or empty. */
  heading: string
  text: string
  score: number
  /** True when the item belongs to another user (found through project sharing). */
  shared: boolean
}

/** Operator options plugins may read. */
export interface Options {
  /** Where model-generated code runs. */
  execBackend: 'direct' | 'sandbox'
  /** When true, no exec tools are registered at all. */
  disableExecTools: boolean
}

/** What Plinth gives a plugin at setup. */
export interface Host {
  kv: KvStore
  log: PluginLogger
  /** Appends a plugin entry to the audit log (hash-chained like every other entry). */
  audit(action: string, data: { [key: string]: JsonValue }): Promise<void>
  /** Publishes an event on a project (and optionally conversation) stream. */
  emit(event: PluginEvent): Promise<void>
  /**
   * Says that sharing changed: the ProjectAuthz adapter now answers differently for this project (or,
   * without an id, for any project). Open event streams re-check their access at once and end with
   * `access_revoked` where it is gone. Streams also re-check periodically, but only this is immediate.
   */
  accessChanged(projectId?: string): Promise<void>
  /**
   * Shared-aware retrieval over project knowledge, for `actor` (as the user it acts for): their own
   * items and what others published in projects they may search — the same hits as the
   * `knowledge_search` tool. With `projectId`, that project only (empty when they may not search it).
   */
  knowledgeSearch(actor: Actor, query: string, options?: { projectId?: string; k?: number }): Promise<KnowledgeHit[]>
  /**
   * Adds a knowledge item (a `draft`, owned by the user the actor acts for) to a project the actor
   * may write to, and indexes it. Publish it with `POST /api/knowledge/:id/publish`.
   */
  addKnowledge(actor: Actor, item: { projectId: string; title: string; text: string }): Promise<{ itemId: string }>
  options: Options
}

/** The project a dispatch is about, when it has one. */
export interface ProjectRef {
  id: string
  ownerId: string
  name: string
}

/** What a handler (and `preview`, and a risk classifier) is told about its dispatch. */
export interface CommandContext {
  actor: Actor
  entrance: Entrance
  project: ProjectRef | null
  conversationId: string | null
  runId: string | null
  /** Aborted on cancel or timeout: pass it to anything that waits. */
  signal: AbortSignal
  kv: KvStore
  log: PluginLogger
}

/** The command's own answer to "how risky is this call?". */
export type RiskClassifier<P> = (params: P, context: CommandContext) => Risk

/**
 * The params type a `paramsSchema` describes (through json-schema-to-ts `FromSchema`), e.g.
 * `{ text: string }` for `{ type: 'object', required: ['text'], additionalProperties: false,
 * properties: { text: { type: 'string' } } }`. A schema not known literally gives `{ [key]: JsonValue }`.
 */
export type ParamsOf<S> = S extends JSONSchema ? FromSchema<S> : { [key: string]: JsonValue }

/**
 * A command: the unit of effect. Ids are lowercase dotted snake segments, e.g. `rdm.draft.compose`,
 * whose first segment is one of the plugin's namespaces.
 */
export interface CommandSpec<P = { [key: string]: JsonValue }, S extends JsonSchema = JsonSchema> {
  id: string
  title: string
  description: string
  /** JSON Schema of `params`; the root must be `type: "object"`. Validated on every dispatch. */
  paramsSchema: S
  risk: Risk | RiskClassifier<P>
  /** Always ask a human, whatever the permission mode or allowances. */
  confirm?: boolean
  /** Entrances that may dispatch it (default: all). */
  entrances?: Entrance[]
  /** Offer it to the model as a tool. `risk` overrides the command's risk for agent calls only. */
  exposeAsTool?: { risk?: Risk; name?: string }
  /** Handler deadline (default 30 s). */
  timeoutMs?: number
  /** Read-only: an identical call within a run may reuse the earlier result. */
  idempotent?: boolean
  /** Side-effect-free text for the confirmation card: what will happen. */
  preview?(params: P, context: CommandContext): string | Promise<string>
  /** Ask a registered resource authorizer before running: `kind` names it, `id` picks the resource. */
  resource?: { kind: string; id(params: P): string }
}

/** Runs a command; returns its JSON result. Throw `CommandError` for a failure the caller should read. */
export type CommandHandler<P = { [key: string]: JsonValue }> = (
  params: P,
  context: CommandContext,
) => JsonValue | Promise<JsonValue>

/** Named instructions listed to the model, with optional files mounted read-only in the sandbox. */
export interface Skill {
  name: string
  description: string
  instructions: string
  filesDir?: string
}

/** Decides whether an actor may use one resource of a plugin's own kind. */
export type ResourceAuthorizer = (
  actorId: string,
  resourceId: string,
  context: { projectId: string | null },
) => boolean | Promise<boolean>

/** Shares projects beyond their owner. At most one is registered. */
export interface ProjectAuthzAdapter {
  canAccessProject(actorId: string, projectId: string, action: ProjectAction): boolean | Promise<boolean>
  /** Ids of projects shared with the actor (never needs to include owned ones). */
  listSharedProjects(actorId: string): string[] | Promise<string[]>
}

/** A flag an allowlisted CLI accepts: bool (`true`/`false` or bare), an int in a range, or a string (default ≤ 64 chars). */
export type CliFlag =
  { type: 'bool' } | { type: 'int'; min: number; max: number } | { type: 'string'; maxLength?: number }

/** One allowed (sub)command: its flags, and flags added when the call leaves them out (e.g. `{limit: 20}`). */
export interface CliSubcommandSpec {
  description?: string
  flags?: { [flag: string]: CliFlag }
  defaults?: { [flag: string]: string | number | boolean }
}

/** An allowed command; with `subcommands`, one of them must follow it. */
export interface CliCommandSpec extends CliSubcommandSpec {
  subcommands?: { [subcommand: string]: CliSubcommandSpec }
}

/**
 * A command-line program offered to the model through a typed allowlist (one tool per CLI, called as
 * `{command, subargs[]}`); anything outside the allowlist is refused with exit code 126. It runs by
 * argv (no shell) through the configured ExecBackend in the conversation's work directory.
 */
export interface CliToolSpec {
  /** The tool's name, e.g. `cc_exec` (`^[a-z][a-z0-9_]{0,40}$`). */
  name: string
  description: string
  /** The program: an absolute path or a name on PATH. */
  binary: string
  /** Probed at start (`versionArgs`, default `--version`): missing or older → the tool is not offered. */
  minVersion?: string
  versionArgs?: string[]
  /** Arguments after the command (default 8). */
  maxArgs?: number
  /** Risk of a call (default low; under the `direct` backend every call is an execution a person approves). */
  risk?: Risk
  /**
   * Extra environment for the CLI (since surface 1.3.0), e.g. the variables that make it ignore
   * configuration in its working directory. Secret-looking names are dropped. Plinth always sets
   * `HOME` to a directory that does not exist and neutralises git's system, global and repository
   * command hooks; a CLI must still not trust its working directory, which anyone may fill.
   */
  env?: { [name: string]: string }
  commands: { [command: string]: CliCommandSpec }
}

/**
 * An MCP server a plugin ships (since surface 1.6.0): Plinth mounts it as an operator-configured one
 * (docs/mcp.md) — each remote tool becomes a command `mcp.<name>.<tool>` of plugin `mcp:<name>`, through
 * the one bus. The operator's `mcpServers` entry of the same name replaces it. Secrets come from
 * environment variable names only (`envFrom`, `headersEnv`). Paths must be absolute.
 */
export interface McpServerSpec {
  /** A command segment (`^[a-z][a-z0-9_]{0,40}$`). */
  name: string
  transport: 'stdio' | 'http'
  /** stdio: the program (an absolute path, e.g. `process.execPath`, or a name on PATH), its arguments, environment and directory. */
  command?: string
  args?: string[]
  env?: { [name: string]: string }
  /** stdio: child variables taken from Plinth's environment (`{CHILD_NAME: "PLINTH_SIDE_NAME"}`). */
  envFrom?: { [name: string]: string }
  cwd?: string
  /** stdio: start it inside the sandbox with the conversation's work directory (under the sandbox backend only). */
  sandbox?: boolean
  /** sandbox: network inside the sandbox (default false). */
  network?: boolean
  /** sandbox: host paths bound read-only at the same path (the server's own code, e.g. the plugin's directory). */
  mounts?: string[]
  /** http: the endpoint, plain headers, and headers whose values come from environment variables. */
  url?: string
  headers?: { [name: string]: string }
  headersEnv?: { [header: string]: string }
  /** Remote tool names to mount (default all) and to leave out. */
  tools?: { include?: string[]; exclude?: string[] }
  /** Overrides the risk the tools' annotations give: for every tool, or per remote tool name. */
  risk?: { default?: Risk; perTool?: { [tool: string]: Risk } }
  /** Always ask a person: every tool (`true`) or the named remote tools. */
  confirm?: boolean | string[]
  /** Offer the tools to the model (default true). */
  exposeAsTool?: boolean
  /** A call's deadline in ms (default 30 s). */
  timeoutMs?: number
}

/** What a plugin registers into during `setup`. */
export interface Registry {
  /**
   * Registers a command. Written inline, its `paramsSchema` types the handler's, `preview`'s and
   * `risk`'s params (see `ParamsOf`; since surface 1.4.0). An explicit `addCommand<P>` still wins.
   * The id's first segment must be one of the plugin's namespaces.
   */
  addCommand<const S extends { type: 'object' } & JsonSchema>(
    spec: CommandSpec<ParamsOf<S>, S>,
    handler: CommandHandler<ParamsOf<S>>,
  ): void
  addCommand<P = { [key: string]: JsonValue }>(spec: CommandSpec<P>, handler: CommandHandler<P>): void
  addSkill(skill: Skill): void
  /** A fragment of the model's system prompt. */
  note(text: string): void
  registerResourceAuthorizer(kind: string, authorizer: ResourceAuthorizer): void
  registerProjectAuthz(adapter: ProjectAuthzAdapter): void
  /** Offers an allowlisted CLI as a tool (since surface 1.1.0; not offered when exec tools are disabled). */
  addCliTool(spec: CliToolSpec): void
  /** Ships an MCP server whose tools become commands (since surface 1.6.0; see `McpServerSpec`). */
  addMcpServer(spec: McpServerSpec): void
}

/** A plugin module's default export. */
export interface PluginDefinition {
  name: string
  version: string
  /** The semver range of `SurfaceVersion` the plugin was written for, e.g. `^1.0.0`. */
  surface: string
  /**
   * The first id segments its commands may use (since surface 1.4.0); default: its `name` (with `-`
   * as `_`). A namespace another plugin (or core) already has is refused at load.
   */
  namespaces?: string[]
  setup(registry: Registry, host: Host): void | Promise<void>
}
