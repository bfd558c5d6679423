import { randomUUID } from 'node:crypto'
import {
  createMcpSession,
  deleteIdleMcpSessions,
  deleteMcpSession,
  touchMcpSession,
  type JsonValue,
  type McpSessionRecord,
  type Store,
} from '../../store/index.js'

/** How long a session may go unused before it is forgotten (the client then starts a new one). */
export const mcpSessionIdleMs = 24 * 60 * 60 * 1000

/** What a client says at `initialize` that the session keeps. */
export interface InitializeParams {
  protocolVersion: string
  capabilities: JsonValue
  clientInfo?: JsonValue
}

/**
 * MCP sessions on /mcp (docs/mcp.md, "Sessions and elicitation"), kept in Postgres so that any
 * instance answers any request of one.
 */
export class McpSessions {
  readonly #store: Store

  constructor(store: Store) {
    this.#store = store
  }

  /** A new session for the user's `initialize`; its id goes out as `Mcp-Session-Id`. */
  async open(userId: string, params: InitializeParams): Promise<string> {
    // Forgotten sessions go as new ones come: no sweeper needed.
    await deleteIdleMcpSessions(this.#store, mcpSessionIdleMs)
    const id = randomUUID()
    await createMcpSession(this.#store, {
      id,
      userId,
      protocolVersion: params.protocolVersion,
      clientCapabilities: params.capabilities,
      clientInfo: params.clientInfo ?? null,
    })
    return id
  }

  /** The user's session of this id, seen now; undefined when unknown, another user's or forgotten. */
  find(id: string, userId: string): Promise<McpSessionRecord | undefined> {
    return touchMcpSession(this.#store, id, userId, mcpSessionIdleMs)
  }

  /** Ends the user's session; false when there was none. */
  end(id: string, userId: string): Promise<boolean> {
    return deleteMcpSession(this.#store, id, userId)
  }
}

/** Whether the client said at `initialize` that it answers form elicitations. */
export function answersElicitation(session: McpSessionRecord): boolean {
  const capabilities = session.clientCapabilities
  if (!isRecord(capabilities) || !isRecord(capabilities.elicitation)) return false
  const { elicitation } = capabilities
  // An empty object is form support (the 2025-06-18 form); later clients name their modes.
  return Object.keys(elicitation).length === 0 || isRecord(elicitation.form)
}

function isRecord(value: unknown): value is { [key: string]: JsonValue } {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
}
