import type { Executor, JsonValue } from './database.js'
import { toPage, type Page, type PageRequest } from './page.js'

export interface Message {
  id: string
  conversationId: string
  runId: string | null
  role: 'system' | 'user' | 'assistant' | 'tool'
  content: string | null
  toolCalls: JsonValue | null
  toolCallId: string | null
  status: string
  createdAt: string
}

/** A conversation's transcript, oldest first. */
export async function listMessages(db: Executor, conversationId: string, page: PageRequest): Promise<Page<Message>> {
  let query = db
    .selectFrom('messages')
    .selectAll()
    .where('conversation_id', '=', conversationId)
    .orderBy('id')
    .limit(page.limit + 1)
  if (page.after) query = query.where('id', '>', page.after)
  const rows = await query.execute()
  return toPage(
    rows.map((row) => ({
      id: row.id,
      conversationId: row.conversation_id,
      runId: row.run_id,
      role: row.role,
      content: row.content,
      toolCalls: row.tool_calls,
      toolCallId: row.tool_call_id,
      status: row.status,
      createdAt: row.created_at.toISOString(),
    })),
    page.limit,
  )
}
