import { CommandError, type CommandSpec, type JsonValue, type PluginLogger, type Risk } from '../extension/index.js'
import type { CommandCatalog, MountedCommand } from '../cmdbus/index.js'
import { McpConnection, McpUnavailableError, withoutMetaSchema, type RemoteTool } from './connection.js'
import { riskFromAnnotations, toolSegment } from './names.js'
import { errorText, modelText, toCommandResult } from './results.js'
import type { McpServerConfig } from './types.js'

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

  constructor(deps: { catalog: CommandCatalog; servers: readonly McpServerConfig[]; log: (plugin: string) => PluginLogger; clientVersion: string; resultMaxBytes: number }) {
    this.#catalog = deps.catalog
    this.#resultMaxBytes = deps.resultMaxBytes
    this.#log = deps.log
    this.#connections = deps.servers.map((config) => {
      const connection: McpConnection = new McpConnection(config, { log: deps.log(`mcp:${config.name}`), clientVersion: deps.clientVersion, onTools: () => this.#mount(connection) })
      return connection
    })
    // Servers start when something first needs the catalog (a listing, a run, /readyz).
    if (this.#connections.length > 0) deps.catalog.addPending(() => this.ready())
  }

  /** Starts every server not yet started; resolves when each has had its first attempt. */
  async ready(): Promise<void> {
    await Promise.all(this.#connections.map((connection) => connection.firstAttempt()))
  }

  /** Problems an operator should see on /readyz. */
  warnings(): string[] {
    const warnings: string[] = []
    for (const connection of this.#connections) {
      const { name } = connection.config
      if (connection.state === 'down') warnings.push(`MCP server ${name} is not available (${connection.problem ?? 'unknown'}); its tools are not offered`)
      for (const refusal of this.#refusals.get(name) ?? []) warnings.push(`MCP server ${name}: ${refusal}`)
    }
    return warnings
  }

  /** Each server's state, for the admin view. */
  status(): Array<{ name: string; transport: string; state: string; problem: string | null; serverName: string; serverVersion: string; tools: number }> {
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
    await Promise.all(this.#connections.map((connection) => connection.stop()))
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
        refusals.push(`tools ${tools.map((tool) => JSON.stringify(tool.name)).join(' and ')} refused: they all map to ${namespace}.${segment}`)
        continue
      }
      commands.push(this.#command(connection, tools[0] as RemoteTool, `${namespace}.${segment}`))
    }
    const { refused } = this.#catalog.mount(plugin, connection.serverInfo.version, commands, namespace)
    for (const { id, reason } of refused) refusals.push(`${id} refused: ${reason}`)
    this.#refusals.set(config.name, refusals)
    for (const refusal of refusals) this.#log(plugin).warn('MCP tool refused', { server: config.name, reason: refusal })
  }

  #command(connection: McpConnection, tool: RemoteTool, id: string): MountedCommand {
    const { config } = connection
    const risk: Risk = config.risk?.perTool?.[tool.name] ?? config.risk?.default ?? riskFromAnnotations(tool.annotations)
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
    const handler = async (params: Params, context: { signal: AbortSignal }): Promise<JsonValue> => {
      let answer
      try {
        answer = await connection.call(tool.name, params, context.signal, timeoutMs)
      } catch (error) {
        if (context.signal.aborted) throw error
        if (error instanceof McpUnavailableError) throw new CommandError('mcp_unavailable', error.message)
        throw new CommandError('mcp_error', `MCP server ${config.name} answered ${tool.name} with an error: ${((error as Error)?.message ?? String(error)).slice(0, 500)}`)
      }
      if (answer.isError === true) throw new CommandError('mcp_tool_error', errorText(answer))
      const problem = connection.outputProblem(tool.name, answer.structuredContent)
      if (problem) throw new CommandError('mcp_invalid_result', `MCP tool ${tool.name} of ${config.name} returned structured content that breaks its own output schema: ${problem}`)
      return toCommandResult(answer, this.#resultMaxBytes)
    }
    return {
      spec,
      handler,
      modelText,
      // A server that is down keeps its commands listed, but the model is not offered them.
      availableWhen: () => connection.state === 'ready',
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
