import { sql } from 'kysely'
import type { JsonValue } from './database.js'
import { storableJson } from './storable.js'
import { kysely, type Executor } from './executor.js'

/** An MCP client's session on /mcp (docs/mcp.md, "Sessions and elicitation"). */
export interface McpSessionRecord {
  id: string
  userId: string
  protocolVersion: string
  clientCapabilities: JsonValue
}

export async function createMcpSession(
  db: Executor,
  session: McpSessionRecord & { clientInfo: JsonValue | null },
): Promise<void> {
  await kysely(db)
    .insertInto('mcp_sessions')
    .values({
      id: session.id,
      user_id: session.userId,
      protocol_version: session.protocolVersion,
      client_capabilities: storableJson(session.clientCapabilities),
      client_info: session.clientInfo === null ? null : storableJson(session.clientInfo),
    })
    .execute()
}

/**
 * The user's session; undefined when unknown, another user's, or idle longer than `idleMs` (then it
 * is deleted: the client starts a new one). Its last use is written at most once a minute, so a
 * request reads one row and writes nothing.
 */
export async function touchMcpSession(
  db: Executor,
  id: string,
  userId: string,
  idleMs: number,
): Promise<McpSessionRecord | undefined> {
  const row = await kysely(db)
    .selectFrom('mcp_sessions')
    .select(['id', 'user_id', 'protocol_version', 'client_capabilities', 'last_seen_at'])
    .where('id', '=', id)
    .executeTakeFirst()
  if (!row || row.user_id !== userId) return undefined
  const idle = Date.now() - row.last_seen_at.getTime()
  if (idle > idleMs) {
    // Unless another request used it meanwhile.
    await kysely(db)
      .deleteFrom('mcp_sessions')
      .where('id', '=', id)
      .where('last_seen_at', '<=', new Date(Date.now() - idleMs))
      .execute()
    return undefined
  }
  if (idle > 60_000)
    await kysely(db).updateTable('mcp_sessions').set({ last_seen_at: new Date() }).where('id', '=', id).execute()
  return {
    id: row.id,
    userId: row.user_id,
    protocolVersion: row.protocol_version,
    clientCapabilities: row.client_capabilities,
  }
}

export async function deleteMcpSession(db: Executor, id: string, userId: string): Promise<boolean> {
  const result = await kysely(db)
    .deleteFrom('mcp_sessions')
    .where('id', '=', id)
    .where('user_id', '=', userId)
    .executeTakeFirst()
  return Number(result.numDeletedRows) > 0
}

/** Sessions idle longer than `idleMs`, deleted; how many. */
export async function deleteIdleMcpSessions(db: Executor, idleMs: number): Promise<number> {
  const result = await kysely(db)
    .deleteFrom('mcp_sessions')
    .where('last_seen_at', '<=', new Date(Date.now() - idleMs))
    .executeTakeFirst()
  return Number(result.numDeletedRows)
}

/** Records that a decision was put to a session as an elicitation. */
export async function createMcpElicitation(db: Executor, decisionId: string, sessionId: string): Promise<void> {
  await kysely(db)
    .insertInto('mcp_elicitations')
    .values({ decision_id: decisionId, session_id: sessionId })
    .onConflict((conflict) => conflict.column('decision_id').doNothing())
    .execute()
}

/**
 * Records the client's answer to the elicitation of a decision, once and only from the session it was
 * put to; false when there is no such open elicitation.
 */
export async function answerMcpElicitation(
  db: Executor,
  decisionId: string,
  sessionId: string,
  action: 'accept' | 'decline' | 'cancel',
): Promise<boolean> {
  const result = await kysely(db)
    .updateTable('mcp_elicitations')
    .set({ action, answered_at: new Date() })
    .where('decision_id', '=', decisionId)
    .where('session_id', '=', sessionId)
    .where('action', 'is', null)
    .executeTakeFirst()
  return Number(result.numUpdatedRows) > 0
}

/** The decision's status, and the session its elicitation was put to with the client's answer (null while unanswered). */
export async function mcpElicitationState(
  db: Executor,
  decisionId: string,
): Promise<{ decision: string; sessionId: string | null; action: string | null } | undefined> {
  const row = await kysely(db)
    .selectFrom('decisions')
    .leftJoin('mcp_elicitations', 'mcp_elicitations.decision_id', 'decisions.id')
    .select([
      'decisions.status as decision',
      sql<string | null>`mcp_elicitations.session_id`.as('sessionId'),
      sql<string | null>`mcp_elicitations.action`.as('action'),
    ])
    .where('decisions.id', '=', decisionId)
    .executeTakeFirst()
  return row
}
