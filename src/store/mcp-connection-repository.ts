import { kysely, type Executor } from './executor.js'

/** A user's connection to an OAuth MCP server; `sealed` is opaque here (the mcp module seals it). */
export interface McpConnectionRecord {
  userId: string
  server: string
  state: string | null
  connected: boolean
  sealed: string
}

const columns = ['user_id', 'server', 'state', 'connected', 'sealed'] as const

function toRecord(row: {
  user_id: string
  server: string
  state: string | null
  connected: boolean
  sealed: string
}): McpConnectionRecord {
  return { userId: row.user_id, server: row.server, state: row.state, connected: row.connected, sealed: row.sealed }
}

export async function getMcpConnection(
  db: Executor,
  userId: string,
  server: string,
): Promise<McpConnectionRecord | undefined> {
  const row = await kysely(db)
    .selectFrom('mcp_connections')
    .select(columns)
    .where('user_id', '=', userId)
    .where('server', '=', server)
    .executeTakeFirst()
  return row ? toRecord(row) : undefined
}

export async function findMcpConnectionByState(db: Executor, state: string): Promise<McpConnectionRecord | undefined> {
  const row = await kysely(db)
    .selectFrom('mcp_connections')
    .select(columns)
    .where('state', '=', state)
    .executeTakeFirst()
  return row ? toRecord(row) : undefined
}

/** Some user's connected record for `server` (its tool list is the same for everyone). */
export async function anyConnectedMcpConnection(
  db: Executor,
  server: string,
): Promise<McpConnectionRecord | undefined> {
  const row = await kysely(db)
    .selectFrom('mcp_connections')
    .select(columns)
    .where('server', '=', server)
    .where('connected', '=', true)
    .orderBy('updated_at', 'desc')
    .executeTakeFirst()
  return row ? toRecord(row) : undefined
}

export async function listMcpConnections(db: Executor, userId: string): Promise<McpConnectionRecord[]> {
  return (
    await kysely(db)
      .selectFrom('mcp_connections')
      .select(columns)
      .where('user_id', '=', userId)
      .orderBy('server')
      .execute()
  ).map(toRecord)
}

export async function saveMcpConnection(db: Executor, record: McpConnectionRecord): Promise<void> {
  const values = {
    user_id: record.userId,
    server: record.server,
    state: record.state,
    connected: record.connected,
    sealed: record.sealed,
  }
  await kysely(db)
    .insertInto('mcp_connections')
    .values(values)
    .onConflict((conflict) =>
      conflict.columns(['user_id', 'server']).doUpdateSet({
        state: record.state,
        connected: record.connected,
        sealed: record.sealed,
        updated_at: new Date(),
      }),
    )
    .execute()
}

export async function deleteMcpConnection(db: Executor, userId: string, server: string): Promise<boolean> {
  const result = await kysely(db)
    .deleteFrom('mcp_connections')
    .where('user_id', '=', userId)
    .where('server', '=', server)
    .executeTakeFirst()
  return Number(result.numDeletedRows) > 0
}

/** Updates an existing row only (false when it is gone). */
export async function updateMcpConnection(db: Executor, record: McpConnectionRecord): Promise<boolean> {
  const result = await kysely(db)
    .updateTable('mcp_connections')
    .set({ state: record.state, connected: record.connected, sealed: record.sealed, updated_at: new Date() })
    .where('user_id', '=', record.userId)
    .where('server', '=', record.server)
    .executeTakeFirst()
  return Number(result.numUpdatedRows) > 0
}
