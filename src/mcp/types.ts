import type { Risk } from '../extension/index.js'

/** One mounted MCP server, as the operator configures it (`mcpServers[]`; docs/mcp.md). */
export interface McpServerConfig {
  /** A command segment: its tools become `mcp.<name>.<tool>`. */
  name: string
  transport: 'stdio' | 'http'
  /** stdio: the program, its arguments, extra environment, working directory. */
  command?: string
  args?: string[]
  env?: { [name: string]: string }
  /** stdio: child variables taken from Plinth's environment (`{CHILD_NAME: "PLINTH_SIDE_NAME"}`), so secrets stay out of the file. */
  envFrom?: { [name: string]: string }
  cwd?: string
  /** http: the endpoint, plain headers, and headers whose values come from environment variables. */
  url?: string
  headers?: { [name: string]: string }
  headersEnv?: { [header: string]: string }
  /** http: each user connects their own account with OAuth 2.1 (docs/mcp.md, "Per-user connections"). */
  auth?: { type: 'oauth'; scopes?: string[] }
  /** Remote tool names to mount (default all) and to leave out. */
  tools?: { include?: string[]; exclude?: string[] }
  /** Overrides the risk the annotations give: for every tool, or per remote tool name. */
  risk?: { default?: Risk; perTool?: { [tool: string]: Risk } }
  /** Always ask a person: every tool (`true`) or the named remote tools. */
  confirm?: boolean | string[]
  /** Offer the tools to the model (default true). */
  exposeAsTool?: boolean
  /** A call's deadline (default 30 s); past it the call is cancelled over the protocol. */
  timeoutMs?: number
  /** How long connecting and `initialize` may take (default 10 s). */
  startTimeoutMs?: number
}
