import {
  CommandError,
  type CommandContext,
  type CommandSpec,
  type JsonValue,
  type PluginLogger,
  type Risk,
} from '../extension/index.js'
import type { CommandCatalog, MountedCommand } from '../cmdbus/index.js'
import {
  anyConnectedMcpConnection,
  deleteMcpConnection,
  findMcpConnectionByState,
  getMcpConnection,
  listMcpConnections,
  type Store,
} from '../store/index.js'
import type { McpConnection, RemoteTool } from './connection.js'
import type * as McpRuntime from './runtime.js'
import { McpAuthorizationError, McpConnectError, McpUnavailableError } from './errors.js'
import { pendingTtlMs, sealContext, StoredOAuthProvider } from './oauth-provider.js'
import { SecretBox } from './secret-box.js'
import { riskFromAnnotations, toolSegment, withoutMetaSchema } from './names.js'
import {
  environmentSecrets,
  errorText,
  keepImages,
  modelText,
  redactSecrets,
  toCommandResult,
  type ImageKeeper,
} from './results.js'
import { SandboxedServers } from './sandbox-pool.js'
import type { McpSandboxHost, McpServerConfig } from './types.js'

type Runtime = typeof McpRuntime

/** What the hub is built from. */
export interface McpHubDeps {
  catalog: CommandCatalog
  servers: readonly McpServerConfig[]
  log: (plugin: string) => PluginLogger
  clientVersion: string
  resultMaxBytes: number
  store?: Store
  secretKey?: string
  /** The exec sandbox, for `sandbox: true` servers (without it they never start). */
  sandbox?: McpSandboxHost
  /** Keeps the images tools return as files of the conversation (without it they stay inline). */
  keepImage?: ImageKeeper
}

/** The hub; the MCP client itself is loaded only when a server is configured. */
export async function openMcpHub(deps: McpHubDeps): Promise<McpHub> {
  return new McpHub(deps, deps.servers.length > 0 ? await import('./runtime.js') : null)
}

const defaultTimeoutMs = 30_000

type Params = { [key: string]: JsonValue }

/**
 * The mounted MCP servers: each one's tools become commands `mcp.<server>.<tool>` of plugin
 * `mcp:<server>`, through the one bus (docs/mcp.md).
 */
export class McpHub {
  readonly #catalog: CommandCatalog
  readonly #connections: McpConnection[]
  readonly #resultMaxBytes: number
  readonly #log: (server: string) => PluginLogger
  /** Per server: why tools were left out at the last mount. */
  readonly #refusals = new Map<string, string[]>()
  readonly #store: Store | undefined
  readonly #box: SecretBox | null
  readonly #clientVersion: string
  readonly #keepImage: ImageKeeper | undefined
  /** OAuth servers: each user's own connection, by `<server>\0<userId>`. */
  readonly #userConnections = new Map<string, Promise<McpConnection>>()
  /** OAuth servers: whose credentials the shared (listing) connection uses, by server. */
  readonly #sharedUser = new Map<string, string>()
  /** `sandbox: true` servers: their processes, one per conversation. */
  readonly #sandboxed: SandboxedServers
  /** Told when a user has connected a server (the bus approves their waiting `connect` decisions). */
  onConnected: ((userId: string, server: string) => Promise<void>) | null = null
  readonly #runtime: Runtime | null

  /** The MCP client: loaded by openMcpHub whenever a server is configured, and only then used. */
  #loaded(): Runtime {
    if (!this.#runtime) throw new Error('the MCP client is not loaded: no MCP server is configured')
    return this.#runtime
  }

  constructor(deps: McpHubDeps, runtime: Runtime | null) {
    this.#runtime = runtime
    this.#catalog = deps.catalog
    this.#resultMaxBytes = deps.resultMaxBytes
    this.#keepImage = deps.keepImage
    this.#log = deps.log
    this.#store = deps.store
    this.#clientVersion = deps.clientVersion
    this.#box = deps.secretKey ? new SecretBox(deps.secretKey) : null
    this.#sandboxed = new SandboxedServers({
      host: deps.sandbox ?? null,
      log: deps.log,
      clientVersion: deps.clientVersion,
      runtime: () => this.#loaded(),
    })
    this.#connections = deps.servers.map((config) => {
      const connection: McpConnection = new (this.#loaded().McpConnection)(config, {
        log: deps.log(`mcp:${config.name}`),
        clientVersion: deps.clientVersion,
        onTools: () => this.#mount(connection),
        // An OAuth server's tools are listed with the credentials of a user who connected it.
        ...(config.auth?.type === 'oauth' && { authProvider: () => this.#anyProvider(config) }),
        // The tools of a sandboxed server are listed by a process of its own in an empty directory.
        ...(config.sandbox && { transport: () => this.#sandboxed.transport(config, null) }),
      })
      return connection
    })
    // Servers start when something first needs the catalog (a listing, a run, /readyz).
    if (this.#connections.length > 0) deps.catalog.addPending(() => this.ready())
  }

  /** Starts every server not yet started; resolves when each has had its first attempt. */
  async ready(): Promise<void> {
    // A sandboxed server starts once the sandbox can be used (the backend may be switched to it later).
    const startable = this.#connections.filter(
      (connection) => !connection.config.sandbox || this.#sandboxed.unavailable() === null,
    )
    await Promise.all(startable.map((connection) => connection.firstAttempt()))
  }

  /** Problems an operator should see on /readyz. */
  warnings(): string[] {
    const warnings: string[] = []
    for (const connection of this.#connections) {
      const { name } = connection.config
      const sandboxProblem = connection.config.sandbox ? this.#sandboxed.unavailable() : null
      if (sandboxProblem)
        warnings.push(
          `MCP server ${name} runs only in the sandbox (sandbox: true), and ${sandboxProblem}: it is not started outside it and its tools are not offered`,
        )
      else if (connection.config.auth?.type === 'oauth' && !this.#box)
        warnings.push(`MCP server ${name} uses OAuth: set PLINTH_SECRET_KEY so users can connect their accounts`)
      // While a retry is under way the last problem still stands.
      else if ((connection.state === 'down' || connection.state === 'starting') && connection.problem)
        warnings.push(
          `MCP server ${name} is not available (${connection.problem ?? 'unknown'}); its tools are not offered`,
        )
      for (const refusal of this.#refusals.get(name) ?? []) warnings.push(`MCP server ${name}: ${refusal}`)
    }
    return warnings
  }

  /** Each server's state, for the admin view. */
  status(): Array<{
    name: string
    transport: string
    state: string
    problem: string | null
    serverName: string
    serverVersion: string
    tools: number
  }> {
    return this.#connections.map((connection) => ({
      name: connection.config.name,
      transport: connection.config.transport,
      state: connection.state,
      problem: connection.problem,
      serverName: connection.serverInfo.name,
      serverVersion: connection.serverInfo.version,
      tools: connection.tools.length,
    }))
  }

  async stop(): Promise<void> {
    const own = await Promise.all([...this.#userConnections.values()].map((connection) => connection.catch(() => null)))
    await Promise.all([...this.#connections, ...own].map((connection) => connection?.stop()))
    await this.#sandboxed.stop()
  }

  /** The OAuth servers and whether `userId` has connected each (never the tokens). */
  async connections(userId: string): Promise<Array<{ server: string; connected: boolean; pending: boolean }>> {
    const records = this.#store ? await listMcpConnections(this.#store, userId) : []
    return this.#oauthConfigs().map((config) => {
      const record = records.find((candidate) => candidate.server === config.name)
      return {
        server: config.name,
        connected: Boolean(record && this.#usable(record)),
        pending: Boolean(record?.state),
      }
    })
  }

  /** Connected, and sealed under the current PLINTH_SECRET_KEY (after a key change, users connect again). */
  #usable(record: { userId: string; server: string; connected: boolean; sealed: string }): boolean {
    return (
      record.connected &&
      this.#box !== null &&
      this.#box.open(record.sealed, sealContext(record.userId, record.server)) !== null
    )
  }

  /**
   * Starts connecting `userId`'s account to an OAuth server: discovery, dynamic client registration and
   * PKCE through the SDK; answers the URL the user opens. The callback lands on `redirectUrl`.
   */
  async connect(userId: string, server: string, redirectUrl: string): Promise<{ authorizationUrl: string }> {
    const { config, store, box } = this.#oauth(server)
    const record = await getMcpConnection(store, userId, server)
    const provider =
      (record &&
        StoredOAuthProvider.open({ store, box, record, ...(config.auth?.scopes && { scopes: config.auth.scopes }) })) ||
      new StoredOAuthProvider({
        store,
        box,
        userId,
        server,
        secrets: {},
        ...(config.auth?.scopes && { scopes: config.auth.scopes }),
      })
    await provider.begin(redirectUrl)
    // Starting over forgets the tokens: nothing of theirs may go on using the old ones.
    await this.#credentialsChanged(server, userId)
    try {
      await this.#loaded().auth(provider, {
        serverUrl: config.url ?? '',
        ...(config.auth?.scopes && { scope: config.auth.scopes.join(' ') }),
      })
    } catch (error) {
      throw new McpConnectError(
        'upstream',
        `MCP server ${server}: its authorization server could not be used (${((error as Error)?.message ?? String(error)).slice(0, 300)})`,
      )
    }
    if (!provider.authorizationUrl)
      throw new McpConnectError('upstream', `MCP server ${server}: its authorization server gave no authorization URL`)
    return { authorizationUrl: provider.authorizationUrl.toString() }
  }

  /** The OAuth callback: exchanges the code for tokens (stored sealed) and offers the user's calls again. */
  async complete(state: string, code: string): Promise<{ server: string; userId: string }> {
    const store = this.#store
    const box = this.#box
    const record = store && box && state ? await findMcpConnectionByState(store, state) : undefined
    if (!store || !box || !record)
      throw new McpConnectError(
        'bad_request',
        'this authorization is unknown or already used; start again with POST /api/mcp/connections/:server',
      )
    const config = this.#oauthConfigs().find((candidate) => candidate.name === record.server)
    const provider = StoredOAuthProvider.open({ store, box, record })
    if (!config || !provider)
      throw new McpConnectError(
        'bad_request',
        'this authorization cannot be completed; start again with POST /api/mcp/connections/:server',
      )
    if (Date.now() - (provider.secrets.startedAt ?? 0) > pendingTtlMs)
      throw new McpConnectError(
        'bad_request',
        `this authorization was started more than ${pendingTtlMs / 60_000} minutes ago; start again with POST /api/mcp/connections/${record.server}`,
      )
    try {
      const result = await this.#loaded().auth(provider, { serverUrl: config.url ?? '', authorizationCode: code })
      if (result !== 'AUTHORIZED') throw new Error('the code was not accepted')
    } catch (error) {
      throw new McpConnectError(
        'upstream',
        `MCP server ${record.server}: the authorization could not be completed (${((error as Error)?.message ?? String(error)).slice(0, 300)})`,
      )
    }
    await this.#credentialsChanged(record.server, record.userId)
    // The shared connection may have been waiting for a first user.
    this.#connections.find((connection) => connection.config.name === record.server)?.retryNow()
    // The calls that waited for this run now, after the page has answered (they may take a while).
    void Promise.resolve(this.onConnected?.(record.userId, record.server)).catch((error: unknown) =>
      this.#log(`mcp:${record.server}`).warn('runs waiting for this connection could not be resumed', { err: error }),
    )
    return { server: record.server, userId: record.userId }
  }

  async disconnect(userId: string, server: string): Promise<boolean> {
    const { store } = this.#oauth(server)
    const deleted = await deleteMcpConnection(store, userId, server)
    await this.#credentialsChanged(server, userId)
    return deleted
  }

  #oauthConfigs(): McpServerConfig[] {
    return this.#connections.map((connection) => connection.config).filter((config) => config.auth?.type === 'oauth')
  }

  #oauth(server: string): { config: McpServerConfig; store: Store; box: SecretBox } {
    const config = this.#oauthConfigs().find((candidate) => candidate.name === server)
    if (!config)
      throw new McpConnectError(
        'not_found',
        `no MCP server ${server} that takes per-user connections (GET /api/mcp/connections lists them)`,
      )
    if (!this.#box || !this.#store)
      throw new McpConnectError(
        'service_unavailable',
        'per-user MCP connections need PLINTH_SECRET_KEY to be set on the server',
      )
    return { config, store: this.#store, box: this.#box }
  }

  async #anyProvider(config: McpServerConfig): Promise<StoredOAuthProvider | null> {
    this.#sharedUser.delete(config.name)
    if (!this.#store || !this.#box) return null
    const record = await anyConnectedMcpConnection(this.#store, config.name)
    const provider = record ? StoredOAuthProvider.open({ store: this.#store, box: this.#box, record }) : null
    if (provider) this.#sharedUser.set(config.name, provider.userId)
    return provider
  }

  /** A user's tokens changed or are gone: drop their connection, and the listing one if it used them. */
  async #credentialsChanged(server: string, userId: string): Promise<void> {
    await this.#forget(server, userId)
    if (this.#sharedUser.get(server) === userId)
      this.#connections.find((connection) => connection.config.name === server)?.reconnect()
  }

  async #forget(server: string, userId: string): Promise<void> {
    const key = `${server}\0${userId}`
    const connection = this.#userConnections.get(key)
    this.#userConnections.delete(key)
    await (await connection?.catch(() => undefined))?.stop()
  }

  /** The user's own connection to an OAuth server; `mcp_connection_required` when they have none. */
  async #forUser(config: McpServerConfig, userId: string): Promise<McpConnection> {
    const required = new CommandError(
      'mcp_connection_required',
      `MCP server ${config.name} acts with each user's own account, and yours is not connected: connect it with POST /api/mcp/connections/${config.name}, then try again`,
    )
    if (!this.#store || !this.#box) throw required
    const key = `${config.name}\0${userId}`
    let known = this.#userConnections.get(key)
    if (!known) {
      // Held as a promise at once: two calls at the same moment share one connection.
      known = this.#openForUser(config, userId)
      this.#userConnections.set(key, known)
      void known.catch(() => this.#userConnections.get(key) === known && this.#userConnections.delete(key))
    }
    const connection = await known.catch(() => null)
    if (!connection) throw required
    return connection
  }

  async #openForUser(config: McpServerConfig, userId: string): Promise<McpConnection> {
    const store = this.#store!
    const box = this.#box!
    const record = await getMcpConnection(store, userId, config.name)
    if (!record || !this.#usable(record)) throw new Error('not connected')
    const connection = new (this.#loaded().McpConnection)(config, {
      log: this.#log(`mcp:${config.name}`),
      clientVersion: this.#clientVersion,
      onTools: () => undefined,
      lists: false,
      authProvider: async () => {
        const current = await getMcpConnection(store, userId, config.name)
        return current?.connected ? StoredOAuthProvider.open({ store, box, record: current }) : null
      },
    })
    return connection
  }

  #mount(connection: McpConnection): void {
    const { config } = connection
    const plugin = `mcp:${config.name}`
    const namespace = `mcp.${config.name}`
    const refusals: string[] = []
    const bySegment = new Map<string, RemoteTool[]>()
    for (const tool of connection.tools) {
      if (config.tools?.include && !config.tools.include.includes(tool.name)) continue
      if (config.tools?.exclude?.includes(tool.name)) continue
      const segment = toolSegment(tool.name)
      if (!segment) {
        refusals.push(`tool ${JSON.stringify(tool.name)} refused: its name has nothing usable as a command segment`)
        continue
      }
      bySegment.set(segment, [...(bySegment.get(segment) ?? []), tool])
    }
    const commands: MountedCommand[] = []
    for (const [segment, tools] of bySegment) {
      if (tools.length > 1) {
        refusals.push(
          `tools ${tools.map((tool) => JSON.stringify(tool.name)).join(' and ')} refused: they all map to ${namespace}.${segment}`,
        )
        continue
      }
      commands.push(this.#command(connection, tools[0] as RemoteTool, `${namespace}.${segment}`))
    }
    for (const name of connection.invalidTools)
      refusals.push(`tool ${JSON.stringify(name)} refused: it has no name or its inputSchema is not an object`)
    const { refused } = this.#catalog.mount(plugin, connection.serverInfo.version, commands, namespace)
    for (const { id, reason } of refused) refusals.push(`${id} refused: ${reason}`)
    this.#refusals.set(config.name, refusals)
    for (const refusal of refusals) this.#log(plugin).warn('MCP tool refused', { server: config.name, reason: refusal })
  }

  #command(connection: McpConnection, tool: RemoteTool, id: string): MountedCommand {
    const { config } = connection
    const risk: Risk =
      config.risk?.perTool?.[tool.name] ?? config.risk?.default ?? riskFromAnnotations(tool.annotations)
    const timeoutMs = config.timeoutMs ?? defaultTimeoutMs
    const title = tool.title ?? tool.annotations?.title ?? tool.name
    const spec: CommandSpec<Params> = {
      id,
      title,
      description: tool.description ?? title,
      paramsSchema: { type: 'object', ...withoutMetaSchema(tool.inputSchema) },
      risk,
      confirm: config.confirm === true || (Array.isArray(config.confirm) && config.confirm.includes(tool.name)),
      ...(config.exposeAsTool !== false && { exposeAsTool: {} }),
      timeoutMs,
      idempotent: tool.annotations?.readOnlyHint === true && tool.annotations?.idempotentHint !== false,
    }
    const secrets = environmentSecrets(config)
    const handler = async (params: Params, context: CommandContext): Promise<JsonValue> => {
      try {
        return redactSecrets(await call(params, context), secrets)
      } catch (error) {
        const message = error instanceof CommandError ? redactSecrets(error.message, secrets) : undefined
        if (error instanceof CommandError && message !== error.message) throw new CommandError(error.code, message!)
        throw error
      }
    }
    const call = async (params: Params, context: CommandContext): Promise<JsonValue> => {
      let answer
      try {
        if (config.sandbox) {
          // The process bound to the caller's conversation, never the listing one.
          answer = await this.#sandboxed.call(config, context, (own) =>
            own.call(tool.name, params, context.signal, timeoutMs),
          )
        } else {
          const target =
            config.auth?.type === 'oauth' ? await this.#forUser(config, context.actor.onBehalfOf) : connection
          answer = await target.call(tool.name, params, context.signal, timeoutMs)
        }
      } catch (error) {
        if (context.signal.aborted || error instanceof CommandError) throw error
        if (error instanceof McpAuthorizationError) {
          if (config.auth?.type !== 'oauth')
            throw new CommandError(
              'mcp_unavailable',
              `MCP server ${config.name} refused the credentials Plinth is configured with (headersEnv)`,
            )
          await this.#forget(config.name, context.actor.onBehalfOf)
          throw new CommandError(
            'mcp_connection_required',
            `MCP server ${config.name} refused your account's credentials: connect it again with POST /api/mcp/connections/${config.name}, then try again`,
          )
        }
        if (error instanceof McpUnavailableError) throw new CommandError('mcp_unavailable', error.message)
        throw new CommandError(
          'mcp_error',
          `MCP server ${config.name} answered ${tool.name} with an error: ${((error as Error)?.message ?? String(error)).slice(0, 500)}`,
        )
      }
      if (answer.isError === true) throw new CommandError('mcp_tool_error', errorText(answer))
      const problem = connection.outputProblem(tool.name, answer.structuredContent)
      if (problem)
        throw new CommandError(
          'mcp_invalid_result',
          `MCP tool ${tool.name} of ${config.name} returned structured content that breaks its own output schema: ${problem}`,
        )
      const keep = this.#keepImage
      const kept = keep && context.conversationId ? await keepImages(answer, context.conversationId, keep) : answer
      return toCommandResult(kept, this.#resultMaxBytes)
    }
    return {
      spec,
      handler,
      modelText,
      // A server that is down keeps its commands listed, but the model is not offered them.
      availableWhen: () => connection.state === 'ready' && (!config.sandbox || this.#sandboxed.unavailable() === null),
      // A sandboxed server runs in the caller's conversation, and only in a sandbox: refused before
      // anyone is asked to approve a call that can only fail.
      ...(config.sandbox && {
        needsConversation: true,
        precheck: () => {
          const reason = this.#sandboxed.unavailable()
          return reason
            ? {
                code: 'sandbox_unavailable',
                message: `MCP server ${config.name} runs only in the sandbox, and ${reason}`,
              }
            : null
        },
      }),
      ...(config.auth?.type === 'oauth' && {
        connectionWhen: async (userId: string) => {
          const store = this.#store
          const record = store && this.#box ? await getMcpConnection(store, userId, config.name) : undefined
          return record && this.#usable(record)
            ? null
            : `connect your account to MCP server ${config.name} first: POST /api/mcp/connections/${config.name} (connecting approves this call)`
        },
      }),
      origin: {
        type: 'mcp',
        server: config.name,
        serverName: connection.serverInfo.name,
        serverVersion: connection.serverInfo.version,
        tool: tool.name,
        openWorldHint: tool.annotations?.openWorldHint ?? null,
      },
    }
  }
}
