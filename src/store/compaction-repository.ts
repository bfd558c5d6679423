import { sql } from 'kysely'
import { appendEvents } from './event-log.js'
import { kysely, type Executor } from './executor.js'
import { newId } from './ids.js'
import { toPage, type Page, type PageRequest } from './page.js'

/** A summary standing in for a conversation's oldest messages in later prompts (docs/guides/agent-runs.md#context-compaction). */
export interface Compaction {
  id: string
  conversationId: string
  /** The range it replaces: after this message (null: from the start) through `throughMessageId`. */
  afterMessageId: string | null
  throughMessageId: string
  messageCount: number
  summary: string
  /** The model that wrote the summary. */
  model: string
  /** The run whose start made it; null when forced over HTTP. */
  runId: string | null
  createdAt: string
}

interface CompactionRow {
  id: string
  conversation_id: string
  after_message_id: string | null
  through_message_id: string
  message_count: number
  summary: string
  model: string
  run_id: string | null
  created_at: Date | string
}

/** The conversation's newest compaction: the one prompts use. */
export async function latestCompaction(db: Executor, conversationId: string): Promise<Compaction | undefined> {
  const { rows } = await sql<CompactionRow>`
    select * from compactions where conversation_id = ${conversationId} order by id desc limit 1`.execute(kysely(db))
  return rows[0] && toCompaction(rows[0])
}

/** `latestCompaction` as a subquery yielding its row as JSON (or null), for a larger statement to read it with. */
export function latestCompactionRead(conversationId: string) {
  return sql`(select to_jsonb(c.*) from compactions c where c.conversation_id = ${conversationId} order by c.id desc limit 1)`
}

/** A row `latestCompactionRead` yielded. */
export function compactionFromJson(row: unknown): Compaction | null {
  return row ? toCompaction(row as CompactionRow) : null
}

/** The conversation's compactions, oldest first. */
export async function listCompactions(
  db: Executor,
  conversationId: string,
  page: PageRequest,
): Promise<Page<Compaction>> {
  const after = page.after ? sql`and id > ${page.after}` : sql``
  const { rows } = await sql<CompactionRow>`
    select * from compactions where conversation_id = ${conversationId} ${after}
    order by id limit ${page.limit + 1}`.execute(kysely(db))
  return toPage(rows.map(toCompaction), page.limit)
}

/**
 * Records a compaction with its `conversation.compacted` event — unless another one reached as far
 * or further meanwhile (then undefined: the newest stays the one prompts use). How many messages it
 * stands for is counted here, in the range it names.
 */
export async function insertCompaction(
  tx: Executor,
  input: Omit<Compaction, 'id' | 'createdAt' | 'messageCount'> & { projectId: string; userId: string },
): Promise<Compaction | undefined> {
  const db = kysely(tx)
  // One compaction of a conversation at a time: a concurrent one waits, then sees this one.
  await sql`select id from conversations where id = ${input.conversationId} for update`.execute(db)
  const { rows } = await sql<CompactionRow>`
    insert into compactions (id, conversation_id, after_message_id, through_message_id, message_count, summary, model, run_id)
    select ${newId()}, ${input.conversationId}, ${input.afterMessageId}, ${input.throughMessageId},
      (select count(*) from messages where conversation_id = ${input.conversationId}
         and id <= ${input.throughMessageId} and id > coalesce(${input.afterMessageId}::text, '')),
      ${input.summary}, ${input.model}, ${input.runId}
    where not exists (select 1 from compactions where conversation_id = ${input.conversationId}
      and through_message_id >= ${input.throughMessageId})
    returning *`.execute(db)
  if (!rows[0]) return undefined
  const compaction = toCompaction(rows[0])
  await appendEvents(tx, [
    {
      type: 'conversation.compacted',
      projectId: input.projectId,
      conversationId: input.conversationId,
      runId: input.runId,
      userId: input.userId,
      data: {
        compactionId: compaction.id,
        conversationId: compaction.conversationId,
        afterMessageId: compaction.afterMessageId,
        throughMessageId: compaction.throughMessageId,
        messageCount: compaction.messageCount,
        model: compaction.model,
        runId: compaction.runId,
      },
    },
  ])
  return compaction
}

function toCompaction(row: CompactionRow): Compaction {
  return {
    id: row.id,
    conversationId: row.conversation_id,
    afterMessageId: row.after_message_id,
    throughMessageId: row.through_message_id,
    messageCount: Number(row.message_count),
    summary: row.summary,
    model: row.model,
    runId: row.run_id,
    createdAt: new Date(row.created_at).toISOString(),
  }
}
