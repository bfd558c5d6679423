import type { Readable, Writable } from 'node:stream'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js'
import {
  ErrorCode,
  InitializeResultSchema,
  isJSONRPCRequest,
  type JSONRPCMessage,
  type JSONRPCRequest,
  type RequestId,
} from '@modelcontextprotocol/sdk/types.js'

/** The id of the proxy's own `initialize` when it renews a forgotten session. */
const reinitializeId = 'plinth-proxy-reinitialize'

export interface McpProxyOptions {
  /** The running server's base URL, e.g. http://127.0.0.1:8080. */
  url: string
  token: string
  /** Scope the tools to this project (`/mcp/projects/:id`). */
  project?: string
  input?: Readable
  output?: Writable
  /** Diagnostics (stdout carries JSON-RPC only). */
  log(line: string): void
}

/** The MCP endpoint under `base` (which may have a path of its own, behind a reverse proxy). */
export function mcpEndpoint(base: string, project?: string): URL {
  const root = new URL(base.endsWith('/') ? base : `${base}/`)
  return new URL(project ? `mcp/projects/${encodeURIComponent(project)}` : 'mcp', root)
}

/**
 * `plinth mcp`: an MCP server on stdio (for desktop clients that start a command) that forwards every
 * JSON-RPC message to a running server's `/mcp` with the token, and its answers back. Resolves with
 * the exit code once stdin closes and the calls under way have been answered.
 */
export async function runMcpProxy(options: McpProxyOptions): Promise<number> {
  const input = options.input ?? process.stdin
  const stdio = new StdioServerTransport(input, options.output ?? process.stdout)
  const initializeIds = new Set<RequestId>()
  const inFlight = new Set<Promise<void>>()
  /** The client's `initialize`, replayed when the server has forgotten the session. */
  let initialize: JSONRPCRequest | null = null
  let reinitialized: ((ok: boolean) => void) | null = null

  const reply = (message: JSONRPCMessage): void => {
    stdio
      .send(message)
      .catch((error: unknown) => options.log(`plinth mcp: cannot write to stdout: ${(error as Error).message}`))
  }
  const connect = (): StreamableHTTPClientTransport => {
    const transport = new StreamableHTTPClientTransport(mcpEndpoint(options.url, options.project), {
      requestInit: { headers: { authorization: `Bearer ${options.token}` } },
    })
    transport.onmessage = (message) => {
      // The answer to our own re-initialize is not the client's to see.
      if ('id' in message && message.id === reinitializeId) {
        const parsed = 'result' in message ? InitializeResultSchema.safeParse(message.result) : undefined
        if (parsed?.success) transport.setProtocolVersion(parsed.data.protocolVersion)
        reinitialized?.(Boolean(parsed?.success))
        return
      }
      // The negotiated version goes on every later request, as the SDK's own client does.
      if ('id' in message && message.id !== undefined && initializeIds.delete(message.id) && 'result' in message) {
        const parsed = InitializeResultSchema.safeParse(message.result)
        if (parsed.success) transport.setProtocolVersion(parsed.data.protocolVersion)
      }
      reply(message)
    }
    transport.onerror = (error) => options.log(`plinth mcp: ${error.message}`)
    return transport
  }
  let http = connect()

  /**
   * The server answered 404 for the session (it was idle for a day, or ended): start a new one with
   * the client's own `initialize`, as the protocol asks of a client, without the client noticing.
   */
  const renew = async (): Promise<boolean> => {
    if (!initialize) return false
    const stale = http
    http = connect()
    void stale.close().catch(() => undefined)
    await http.start()
    const answered = new Promise<boolean>((resolve) => (reinitialized = resolve))
    await http.send({ ...initialize, id: reinitializeId })
    const ok = await answered
    reinitialized = null
    if (ok) await http.send({ jsonrpc: '2.0', method: 'notifications/initialized' })
    options.log(
      ok
        ? 'plinth mcp: the server had forgotten the session; started a new one'
        : 'plinth mcp: the server had forgotten the session, and a new one could not be started',
    )
    return ok
  }

  stdio.onerror = (error) => options.log(`plinth mcp: unreadable input: ${error.message}`)
  stdio.onmessage = (message) => {
    if (isJSONRPCRequest(message) && message.method === 'initialize') {
      initializeIds.add(message.id)
      initialize = message
    }
    const forward = async (): Promise<void> => {
      try {
        await http.send(message)
      } catch (error) {
        if (!(error instanceof StreamableHTTPError && error.code === 404 && http.sessionId && (await renew())))
          throw error
        await http.send(message)
      }
    }
    const sending = forward().catch((error: unknown) => {
      // The server could not be reached or refused the request (401, 404): the client gets an
      // error for its request instead of waiting forever.
      if (isJSONRPCRequest(message)) {
        initializeIds.delete(message.id)
        reply({
          jsonrpc: '2.0',
          id: message.id,
          error: { code: ErrorCode.InternalError, message: `plinth mcp: ${options.url}: ${describe(error)}` },
        })
      }
    })
    inFlight.add(sending)
    void sending.finally(() => inFlight.delete(sending))
  }

  const ended = new Promise<void>((resolve) => {
    input.once('end', resolve)
    input.once('close', resolve)
  })
  await http.start()
  await stdio.start()
  await ended
  while (inFlight.size > 0) await Promise.allSettled([...inFlight])
  await http.close()
  await stdio.close()
  return 0
}

function describe(error: unknown): string {
  const { message, code } = error as { message?: string; code?: unknown }
  const hint = code === 401 ? ' (is the token valid? plinth tokens create <user> issues one)' : ''
  return `${message ?? String(error)}${hint}`
}
