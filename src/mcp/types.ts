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
  /**
   * stdio: run the server inside the exec sandbox, one process per conversation with its work directory
   * as cwd (docs/mcp.md, "Sandboxed stdio servers"). Never started outside the sandbox.
   */
  sandbox?: boolean
  /** sandbox: network inside the sandbox (default false, like exec). */
  network?: boolean
  /** sandbox: host paths bound read-only at the same path (the server's code, a runtime outside /usr). */
  mounts?: string[]
  /** sandbox: a conversation's process is closed after this long without a call (default 10 min). */
  idleTimeoutMs?: number
  /** sandbox: conversation processes alive at once (default 8); the least recently used is closed first. */
  maxProcesses?: number
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

/** A program ready to spawn inside the sandbox (argv of the whole wrapper chain). */
export interface SandboxLaunch {
  argv: string[]
  cwd: string
  env: { [name: string]: string }
  /** Bytes the program reads on fds 3, 4, … (bwrap's seccomp filter and arguments). */
  fds: Buffer[]
  /** Called once the program has exited: kills what is left of it and removes what was made for it. */
  release(): Promise<void>
}

/**
 * What sandboxed stdio servers need from the exec sandbox (given by the app; src/mcp does not run
 * programs itself). Errors it throws as CommandError reach the caller as they are.
 */
export interface McpSandboxHost {
  /** Why the sandbox cannot be used now (the exec backend is direct, the probe failed), or null. */
  unavailable(): string | null
  /** Prepares `argv` in the sandbox with the conversation's work directory (null: an empty scratch directory). */
  launch(input: {
    conversationId: string | null
    argv: string[]
    env: { [name: string]: string }
    network: boolean
    mounts: string[]
  }): Promise<SandboxLaunch>
  /** Refuses a call in a conversation whose work directory is over its quota (CommandError `quota_exceeded`). */
  beforeCall(conversationId: string, ownerId: string): Promise<void>
  /** Measures the work directory after a call that began at `startedAt`; over quota, removes what it wrote and throws. */
  afterCall(conversationId: string, ownerId: string, startedAt: number): Promise<void>
}
