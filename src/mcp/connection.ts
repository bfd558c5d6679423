import { Ajv, type ValidateFunction } from 'ajv'
import { UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js'
import { z } from 'zod'
import type { PluginLogger } from '../extension/index.js'
import { McpAuthorizationError, McpUnavailableError } from './errors.js'
import { LaunchTransport } from './launch-transport.js'
import { withoutMetaSchema, type ToolAnnotations } from './names.js'
import { environmentSecrets, redactSecrets, type WireToolResult } from './results.js'
import type { McpServerConfig } from './types.js'
import { injectTraceHeaders } from '../telemetry/index.js'

/** A remote tool as listed (validated loosely: one bad tool must not hide the others). */
export interface RemoteTool {
  name: string
  title?: string
  description?: string
  inputSchema: { [key: string]: unknown }
  outputSchema?: { [key: string]: unknown }
  annotations?: ToolAnnotations & { title?: string }
}

export type ConnectionState = 'idle' | 'starting' | 'ready' | 'down' | 'stopped'

const defaultStartTimeoutMs = 10_000
const maxBackoffMs = 60_000
/** A connection that stayed up this long starts its backoff over when it drops. */
const stableMs = 30_000
const maxListPages = 20
/** An OAuth server nobody has connected yet is looked at again this often (someone may connect through another instance). */
const waitingRecheckMs = 30_000

// The SDK's own list schema refuses the whole list for one malformed tool; Plinth checks each tool.
const LooseToolList = z.looseObject({ tools: z.array(z.unknown()), nextCursor: z.string().optional() })
const LooseCallResult = z.looseObject({
  content: z.array(z.unknown()).optional(),
  structuredContent: z.unknown().optional(),
  isError: z.boolean().optional(),
})

/**
 * One MCP server: connects when first needed, lists its tools (following `tools/list_changed`),
 * calls them, and reconnects with backoff when a stdio server dies (docs/mcp.md, "Lifecycle").
 */
export class McpConnection {
  readonly config: McpServerConfig
  state: ConnectionState = 'idle'
  /** Why the server is not ready, or null. */
  problem: string | null = null
  serverInfo: { name: string; version: string } = { name: '', version: '' }
  tools: RemoteTool[] = []
  /** Names of listed tools that are not tools (no name or no object inputSchema): refused. */
  invalidTools: string[] = []
  readonly #log: PluginLogger
  readonly #clientVersion: string
  readonly #onTools: () => void
  /** OAuth servers: the credentials to connect with, or null when nobody can connect yet. */
  readonly #authProvider: (() => Promise<OAuthClientProvider | null>) | undefined
  /** False for a user's own connection to an OAuth server: it only calls; the shared one lists. */
  readonly #lists: boolean
  /** How to reach the server instead of the configured transport (a sandboxed server's launch). */
  readonly #makeTransport: (() => Transport) | undefined
  /** False: a server that stops is not restarted in the background; the next call starts it. */
  readonly #restarts: boolean
  #waiting = false
  #listings = 0
  /** Listings started by list_changed, not yet answered. */
  readonly #relistings = new Set<Promise<void>>()
  // No logger: an MCP server's schemas would otherwise print their text to stderr.
  readonly #ajv = new Ajv({ strict: false, allErrors: true, logger: false })
  readonly #outputChecks = new Map<string, ValidateFunction | null>()
  #client: Client | null = null
  #attempt: Promise<void> | null = null
  #first: Promise<void> | null = null
  #failures = 0
  #connectedAt = 0
  #retry: NodeJS.Timeout | undefined

  constructor(
    config: McpServerConfig,
    deps: {
      log: PluginLogger
      clientVersion: string
      onTools: () => void
      authProvider?: () => Promise<OAuthClientProvider | null>
      lists?: boolean
      transport?: () => Transport
      restarts?: boolean
    },
  ) {
    this.config = config
    this.#log = deps.log
    this.#clientVersion = deps.clientVersion
    this.#onTools = deps.onTools
    this.#authProvider = deps.authProvider
    this.#lists = deps.lists ?? true
    this.#makeTransport = deps.transport
    this.#restarts = deps.restarts ?? true
  }

  /** Tries again now (a user just connected an OAuth server that was waiting for one). */
  retryNow(): void {
    if (this.state === 'stopped' || this.state === 'ready') return
    clearTimeout(this.#retry)
    void this.#connect()
  }

  /** Starts the server if it never was; resolves when its first attempt has ended, whichever way. */
  firstAttempt(): Promise<void> {
    this.#first ??= this.#connect()
    return this.#first
  }

  /** True when the server refused the credentials (an OAuth user's tokens, or the configured headers). */
  get unauthorized(): boolean {
    return this.#unauthorized
  }

  /** Calls a tool; reconnects first when the server is down. */
  async call(
    tool: string,
    args: { [key: string]: unknown },
    signal: AbortSignal,
    timeoutMs: number,
  ): Promise<WireToolResult> {
    const client = await this.#connected()
    try {
      // The bus aborts `signal` at the command's deadline; the SDK then sends notifications/cancelled.
      return await client.request({ method: 'tools/call', params: { name: tool, arguments: args } }, LooseCallResult, {
        signal,
        timeout: timeoutMs + 5_000,
      })
    } catch (error) {
      if (signal.aborted) throw error
      if (error instanceof UnauthorizedError || (error as { code?: unknown }).code === 401)
        throw new McpAuthorizationError(`MCP server ${this.config.name} refused the credentials`)
      if (client !== this.#client || (error as { code?: unknown }).code === -32000)
        throw new McpUnavailableError(`MCP server ${this.config.name} stopped during the call`)
      throw error
    }
  }

  /** Checks structured content against the tool's declared output schema: null when it conforms. */
  outputProblem(tool: string, structured: unknown): string | null {
    if (!this.#outputChecks.has(tool)) {
      const schema = this.tools.find((candidate) => candidate.name === tool)?.outputSchema
      let check: ValidateFunction | null = null
      if (schema) {
        try {
          check = this.#ajv.compile(withoutMetaSchema(schema))
        } catch {
          check = null
        }
      }
      this.#outputChecks.set(tool, check)
    }
    const check = this.#outputChecks.get(tool)
    if (!check || structured === undefined) return null
    return check(structured) ? null : this.#ajv.errorsText(check.errors)
  }

  async stop(): Promise<void> {
    this.state = 'stopped'
    clearTimeout(this.#retry)
    const client = this.#client
    this.#client = null
    await client?.close().catch(() => undefined)
    // A close already under way (a start that timed out: the SDK closes without waiting) ends its
    // child too: a stdio child is stopped before the server exits, not left running.
    await Promise.allSettled([...this.#closing])
  }

  /** Transport closes under way (the SDK's stdio close waits for the child, then kills it). */
  readonly #closing = new Set<Promise<void>>()

  /** Records each close of `transport`, for `stop` to wait for. */
  #tracked(transport: Transport): Transport {
    const close = transport.close.bind(transport)
    transport.close = () => {
      const closing = close()
      this.#closing.add(closing)
      void closing.catch(() => undefined).finally(() => this.#closing.delete(closing))
      return closing
    }
    return transport
  }

  async #connected(): Promise<Client> {
    if (this.state === 'stopped') throw new McpUnavailableError(`MCP server ${this.config.name} is stopped`)
    if (this.state === 'idle') await this.firstAttempt()
    else if (this.state === 'starting') await this.#attempt
    else if (this.state === 'down') {
      // Someone needs it now: try at once rather than at the next backoff step.
      clearTimeout(this.#retry)
      await this.#connect()
    }
    if (!this.#client || this.state !== 'ready') {
      if (this.#unauthorized) throw new McpAuthorizationError(`MCP server ${this.config.name} refused the credentials`)
      throw new McpUnavailableError(
        `MCP server ${this.config.name} is not available: ${this.problem ?? 'not connected'}`,
      )
    }
    return this.#client
  }

  #unauthorized = false

  #connect(): Promise<void> {
    if (this.#attempt) return this.#attempt
    // Never rejects: a failure is the connection's state and problem, tried again later.
    this.#attempt = this.#open()
      .catch((error: unknown) => {
        if (this.#stopped) return
        this.problem = describe(error, this.config.startTimeoutMs ?? defaultStartTimeoutMs)
        this.#down()
      })
      .finally(() => {
        this.#attempt = null
      })
    return this.#attempt
  }

  get #stopped(): boolean {
    return this.state === 'stopped'
  }

  async #open(): Promise<void> {
    if (this.#stopped) return
    this.state = 'starting'
    this.#unauthorized = false
    const auth = this.#authProvider ? await this.#authProvider() : undefined
    if (this.#stopped) return
    if (auth === null) {
      // Nobody has connected this OAuth server yet. Another instance may see someone connect: look again now and then.
      this.#waiting = true
      this.problem = `no user has connected it yet (POST /api/mcp/connections/${this.config.name})`
      this.state = 'down'
      this.#onTools()
      this.#schedule(waitingRecheckMs)
      return
    }
    this.#waiting = false
    const client = new Client({ name: 'plinth', version: this.#clientVersion }, { capabilities: {} })
    const timeout = this.config.startTimeoutMs ?? defaultStartTimeoutMs
    let transport: Transport | undefined
    try {
      transport = this.#tracked(this.#transport(auth))
      client.onclose = () => this.#closed(client)
      client.onerror = (error) => this.#log.debug('MCP transport error', { server: this.config.name, err: error })
      client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
        if (client !== this.#client) return
        const listing = this.#refresh(client).catch((error: Error) =>
          this.#log.warn('MCP tools could not be listed again', { server: this.config.name, err: error }),
        )
        this.#relistings.add(listing)
        void listing.finally(() => this.#relistings.delete(listing))
      })
      this.#client = client
      // One deadline for connecting, initialize and the first listing.
      const deadline = Date.now() + timeout
      await client.connect(transport, { timeout })
      const info = client.getServerVersion()
      this.serverInfo = { name: info?.name ?? this.config.name, version: info?.version ?? '' }
      if (this.#lists) await this.#refresh(client, Math.max(1, deadline - Date.now()))
      // A list_changed during the first listing (a server that adds tools once initialized) makes the
      // first answer stale: the connection is ready once the newest listing is in.
      while (this.#relistings.size > 0) await Promise.allSettled([...this.#relistings])
      if (client !== this.#client || this.#stopped) {
        await client.close().catch(() => undefined)
        return
      }
      this.state = 'ready'
      this.problem = null
      this.#connectedAt = Date.now()
      this.#log.info('MCP server connected', {
        server: this.config.name,
        serverName: this.serverInfo.name,
        serverVersion: this.serverInfo.version,
        tools: this.tools.length,
      })
    } catch (error) {
      if (this.#client === client) this.#client = null
      await client.close().catch(() => undefined)
      if (this.#stopped) return
      this.problem = describe(error, timeout)
      // bwrap says why it could not build the sandbox (a mount that does not exist, …).
      if (transport instanceof LaunchTransport && transport.sandboxError) this.problem += ` (${transport.sandboxError})`
      if (error instanceof UnauthorizedError || (error as { code?: unknown }).code === 401) {
        // The credentials, not the server: trying again will not help until they change.
        this.#unauthorized = true
        this.problem = 'it refused the credentials'
        this.state = 'down'
        this.#onTools()
        return
      }
      this.#down()
    }
  }

  /** Drops the live connection and connects again (the credentials it used changed). */
  reconnect(): void {
    if (this.#stopped || this.state === 'idle') return
    const client = this.#client
    this.#client = null
    void client?.close().catch(() => undefined)
    this.state = 'down'
    clearTimeout(this.#retry)
    void this.#connect()
  }

  #transport(authProvider: OAuthClientProvider | undefined): Transport {
    const { config } = this
    if (this.#makeTransport) return this.#makeTransport()
    if (config.transport === 'http') {
      const headers: { [name: string]: string } = { ...config.headers }
      for (const [header, variable] of Object.entries(config.headersEnv ?? {})) {
        const value = process.env[variable]
        if (value === undefined) throw new Error(`headersEnv.${header}: ${variable} is not set`)
        headers[header] = value
      }
      return new StreamableHTTPClientTransport(new URL(config.url ?? ''), {
        requestInit: { headers },
        // Calls made inside a traced tool call carry its `traceparent`.
        fetch: (url, init) => fetch(url, { ...init, headers: injectTraceHeaders(new Headers(init?.headers)) }),
        ...(authProvider && { authProvider }),
      })
    }
    const env: { [name: string]: string } = { ...getDefaultEnvironment(), ...config.env }
    for (const [name, variable] of Object.entries(config.envFrom ?? {})) {
      const value = process.env[variable]
      if (value === undefined) throw new Error(`envFrom.${name}: ${variable} is not set`)
      env[name] = value
    }
    const transport = new StdioClientTransport({
      command: config.command ?? '',
      args: config.args ?? [],
      env,
      ...(config.cwd && { cwd: config.cwd }),
      stderr: 'pipe',
    })
    // The server's own diagnostics, a line at a time, at debug level (a chatty server cannot flood the log).
    transport.stderr?.on('data', (chunk: Buffer) =>
      this.#log.debug('MCP server stderr', {
        server: this.config.name,
        text: redactSecrets(chunk.toString('utf8').slice(0, 2000), environmentSecrets(config)),
      }),
    )
    return transport
  }

  async #refresh(client: Client, timeout = this.config.startTimeoutMs ?? defaultStartTimeoutMs): Promise<void> {
    // Listings can overlap (a list_changed during the first one): only the newest may be mounted.
    const generation = ++this.#listings
    const tools: RemoteTool[] = []
    const invalid: string[] = []
    let cursor: string | undefined
    for (let page = 0; page < maxListPages; page++) {
      const answer = await client.request({ method: 'tools/list', params: cursor ? { cursor } : {} }, LooseToolList, {
        timeout,
      })
      for (const raw of answer.tools) {
        const tool = remoteTool(raw)
        if (tool) tools.push(tool)
        else
          invalid.push(
            typeof (raw as { name?: unknown })?.name === 'string'
              ? (raw as { name: string }).name
              : JSON.stringify(raw).slice(0, 60),
          )
        if (!tool)
          this.#log.warn('MCP tool ignored: not a tool (a name and an inputSchema object are required)', {
            server: this.config.name,
            tool: JSON.stringify(raw).slice(0, 200),
          })
      }
      cursor = answer.nextCursor
      if (!cursor) break
    }
    if (client !== this.#client || generation !== this.#listings) return
    this.tools = tools
    this.invalidTools = invalid
    this.#outputChecks.clear()
    this.#onTools()
  }

  #closed(client: Client): void {
    if (client !== this.#client || this.state === 'stopped' || this.#waiting) return
    this.#client = null
    if (Date.now() - this.#connectedAt >= stableMs) this.#failures = 0
    this.problem = 'the server stopped'
    this.#log.warn(this.#restarts ? 'MCP server stopped; restarting it' : 'MCP server stopped', {
      server: this.config.name,
    })
    this.#down()
  }

  /** Not reachable: its tools are not offered, and it is tried again after a growing pause. */
  #down(): void {
    if (this.#stopped) return
    this.state = 'down'
    this.#onTools()
    if (!this.#restarts) return
    const delay = Math.min(maxBackoffMs, 1000 * 2 ** this.#failures)
    this.#failures++
    this.#log.warn('MCP server not available', { server: this.config.name, problem: this.problem, retryInMs: delay })
    this.#schedule(delay)
  }

  #schedule(delay: number): void {
    clearTimeout(this.#retry)
    this.#retry = setTimeout(() => void this.#connect(), delay)
    this.#retry.unref()
  }
}

function remoteTool(raw: unknown): RemoteTool | null {
  if (!raw || typeof raw !== 'object') return null
  const tool = raw as { [key: string]: unknown }
  if (typeof tool.name !== 'string' || !tool.name) return null
  if (!tool.inputSchema || typeof tool.inputSchema !== 'object' || Array.isArray(tool.inputSchema)) return null
  const text = (value: unknown) => (typeof value === 'string' ? value : undefined)
  const object = (value: unknown) =>
    value && typeof value === 'object' && !Array.isArray(value) ? (value as { [key: string]: unknown }) : undefined
  const annotations = object(tool.annotations)
  return {
    name: tool.name,
    ...(text(tool.title) && { title: text(tool.title) }),
    ...(text(tool.description) && { description: text(tool.description) }),
    inputSchema: tool.inputSchema as { [key: string]: unknown },
    ...(object(tool.outputSchema) && { outputSchema: object(tool.outputSchema) }),
    ...(annotations && { annotations: annotations as RemoteTool['annotations'] }),
  }
}

function describe(error: unknown, timeout: number): string {
  const message = (error as Error)?.message ?? String(error)
  if ((error as { code?: unknown }).code === -32001 || /timed out/i.test(message))
    return `it did not answer initialize within ${timeout} ms`
  if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 'its command was not found'
  if (/Connection closed/i.test(message)) return 'it exited before answering initialize'
  return message.slice(0, 300)
}
