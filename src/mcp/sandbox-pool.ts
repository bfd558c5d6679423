import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import { CommandError, type CommandContext, type PluginLogger } from '../extension/index.js'
import type { McpConnection } from './connection.js'
import type * as McpRuntime from './runtime.js'
import type { McpSandboxHost, McpServerConfig, SandboxLaunch } from './types.js'
import { environmentSecrets, redactSecrets } from './results.js'

export const defaultIdleTimeoutMs = 10 * 60_000
export const defaultMaxProcesses = 8

interface Live {
  connection: McpConnection
  /** Calls under way: a process is closed for idleness only when it has none. */
  calls: number
  idle: NodeJS.Timeout | undefined
}

/**
 * The processes of sandboxed stdio servers (`sandbox: true`, docs/mcp.md "Sandboxed stdio servers"). A
 * call in conversation C goes to the server's process bound to C's work directory, started on first
 * use, so what a tool writes lands in C's directory and nowhere else. A process is closed after
 * `idleTimeoutMs` without a call, and at most `maxProcesses` live per server (the least recently used
 * idle one is closed first). The shared process that lists the tools runs in an empty scratch
 * directory (see `transport`). Nothing here ever starts outside the sandbox.
 */
export class SandboxedServers {
  readonly #host: McpSandboxHost | null
  readonly #log: (plugin: string) => PluginLogger
  readonly #clientVersion: string
  /** Per server, its live conversation processes by conversation id, least recently used first. */
  readonly #pools = new Map<string, Map<string, Live>>()
  #stopped = false

  /** The MCP client (loaded only when a server is configured, which is when this is used). */
  readonly #runtime: () => typeof McpRuntime

  constructor(deps: {
    host: McpSandboxHost | null
    log: (plugin: string) => PluginLogger
    clientVersion: string
    runtime: () => typeof McpRuntime
  }) {
    this.#runtime = deps.runtime
    this.#host = deps.host
    this.#log = deps.log
    this.#clientVersion = deps.clientVersion
  }

  /** Why sandboxed servers cannot run now (the exec backend is not the sandbox, …), or null. */
  unavailable(): string | null {
    return this.#host ? this.#host.unavailable() : 'no sandbox is set up'
  }

  /** Live conversation processes of a server. */
  processes(server: string): number {
    return this.#pools.get(server)?.size ?? 0
  }

  /** A transport that starts the server in the sandbox: in the conversation's work directory, or (null) a scratch one. */
  transport(config: McpServerConfig, conversationId: string | null): Transport {
    const log = this.#log(`mcp:${config.name}`)
    return new (this.#runtime().LaunchTransport)(
      () => this.#launch(config, conversationId),
      (text) =>
        log.debug('MCP server stderr', {
          server: config.name,
          text: redactSecrets(text.slice(0, 2000), environmentSecrets(config)),
        }),
    )
  }

  /** Runs `call` with the process of the caller's conversation (started when there is none). */
  async call<T>(
    config: McpServerConfig,
    context: CommandContext,
    call: (connection: McpConnection) => Promise<T>,
  ): Promise<T> {
    const conversationId = context.conversationId
    if (!conversationId) {
      throw new CommandError(
        'conversation_required',
        `MCP server ${config.name} runs in a conversation's work directory (sandbox: true): call its tools within a conversation (dispatch with a conversationId)`,
      )
    }
    const reason = this.unavailable()
    if (reason || !this.#host)
      throw new CommandError(
        'sandbox_unavailable',
        `MCP server ${config.name} runs only in the sandbox, and ${reason ?? 'there is none'}`,
      )
    const host = this.#host
    await host.beforeCall(conversationId, context.actor.onBehalfOf)
    if (this.#stopped) throw new CommandError('mcp_unavailable', `MCP server ${config.name} is stopped`)
    const live = this.#live(config, conversationId)
    live.calls++
    clearTimeout(live.idle)
    const startedAt = Date.now()
    try {
      return await call(live.connection)
    } finally {
      live.calls--
      if (live.calls === 0 && this.#pools.get(config.name)?.get(conversationId) === live) {
        live.idle = setTimeout(
          () => void this.#close(config.name, conversationId, live, 'idle'),
          config.idleTimeoutMs ?? defaultIdleTimeoutMs,
        )
        live.idle.unref()
      }
      // What the tool wrote counts against the work directory's quota, as an execution's does.
      await host.afterCall(conversationId, context.actor.onBehalfOf, startedAt)
    }
  }

  /** Closes every process (shutdown). */
  async stop(): Promise<void> {
    this.#stopped = true
    const closing: Array<Promise<void>> = []
    for (const [server, pool] of this.#pools)
      for (const [conversationId, live] of pool) closing.push(this.#close(server, conversationId, live, 'shutdown'))
    await Promise.all(closing)
  }

  #live(config: McpServerConfig, conversationId: string): Live {
    let pool = this.#pools.get(config.name)
    if (!pool) this.#pools.set(config.name, (pool = new Map()))
    const known = pool.get(conversationId)
    if (known) {
      // Most recently used last.
      pool.delete(conversationId)
      pool.set(conversationId, known)
      return known
    }
    const max = config.maxProcesses ?? defaultMaxProcesses
    while (pool.size >= max) {
      // The least recently used without a call under way. A busy one is never closed: another user's
      // call would fail for this one's sake.
      const idle = [...pool].find(([, candidate]) => candidate.calls === 0)
      if (!idle) {
        throw new CommandError(
          'mcp_busy',
          `MCP server ${config.name} already runs ${max} processes (maxProcesses), each with a call under way: try again shortly`,
        )
      }
      void this.#close(config.name, idle[0], idle[1], `more than maxProcesses (${max})`)
    }
    const connection = new (this.#runtime().McpConnection)(config, {
      log: this.#log(`mcp:${config.name}`),
      clientVersion: this.#clientVersion,
      onTools: () => undefined,
      lists: false,
      restarts: false,
      transport: () => this.transport(config, conversationId),
    })
    const live: Live = { connection, calls: 0, idle: undefined }
    pool.set(conversationId, live)
    return live
  }

  #close(server: string, conversationId: string, live: Live, why: string): Promise<void> {
    clearTimeout(live.idle)
    const pool = this.#pools.get(server)
    if (pool?.get(conversationId) === live) pool.delete(conversationId)
    if (why !== 'shutdown')
      this.#log(`mcp:${server}`).info('sandboxed MCP server process closed', { server, conversationId, why })
    return live.connection.stop()
  }

  async #launch(config: McpServerConfig, conversationId: string | null): Promise<SandboxLaunch> {
    const reason = this.unavailable()
    if (reason || !this.#host)
      throw new Error(`it runs only in the sandbox (sandbox: true), and ${reason ?? 'there is none'}`)
    const env: { [name: string]: string } = { ...config.env }
    for (const [name, variable] of Object.entries(config.envFrom ?? {})) {
      const value = process.env[variable]
      if (value === undefined) throw new Error(`envFrom.${name}: ${variable} is not set`)
      env[name] = value
    }
    return this.#host.launch({
      conversationId,
      argv: [config.command ?? '', ...(config.args ?? [])],
      env,
      network: config.network === true,
      mounts: config.mounts ?? [],
    })
  }
}
