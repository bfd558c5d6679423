import { sql, type RawBuilder } from 'kysely'
import type { JsonValue } from './database.js'
import { toPage, type Page, type PageRequest } from './page.js'
import { storableJson } from './storable.js'
import { kysely, type Executor } from './executor.js'

export type DecisionStatus = 'pending' | 'approved' | 'rejected' | 'expired'

export interface DecisionRecord {
  id: string
  dispatchId: string
  ownerId: string
  projectId: string | null
  conversationId: string | null
  runId: string | null
  callId: string | null
  commandId: string
  params: JsonValue
  preview: string | null
  risk: string
  reasons: string[]
  status: DecisionStatus
  scope: 'once' | 'session' | null
  decidedBy: string | null
  note: string | null
  createdAt: string
  expiresAt: string
  decidedAt: string | null
  /** The only users who may approve it (designated approvers), or null: whoever may act on it. */
  approvers: string[] | null
  /** `connect`: the person must first connect their account to the MCP server the call goes to. */
  kind: 'approve' | 'connect'
  /** What the person answered besides approve or reject: changed params, or a reply instead of running it. */
  reply: DecisionReply | null
}

export type DecisionReply = { kind: 'edit'; params: JsonValue } | { kind: 'respond'; text: string }

export type NewDecision = Pick<
  DecisionRecord,
  | 'id'
  | 'dispatchId'
  | 'ownerId'
  | 'projectId'
  | 'conversationId'
  | 'runId'
  | 'callId'
  | 'commandId'
  | 'params'
  | 'preview'
  | 'risk'
  | 'reasons'
  | 'expiresAt'
> & { approvers?: string[] | null; kind?: 'approve' | 'connect' }

export async function insertDecision(tx: Executor, decision: NewDecision): Promise<DecisionRecord> {
  const row = await kysely(tx)
    .insertInto('decisions')
    .values({
      id: decision.id,
      dispatch_id: decision.dispatchId,
      owner_id: decision.ownerId,
      project_id: decision.projectId,
      conversation_id: decision.conversationId,
      run_id: decision.runId,
      call_id: decision.callId,
      command_id: decision.commandId,
      params: storableJson(decision.params),
      preview: decision.preview,
      risk: decision.risk,
      reasons: storableJson(decision.reasons),
      expires_at: decision.expiresAt,
      approvers: decision.approvers ? storableJson(decision.approvers) : null,
      ...(decision.kind && { kind: decision.kind }),
    })
    .returningAll()
    .executeTakeFirstOrThrow()
  return toDecision(row)
}

export async function getDecision(db: Executor, id: string): Promise<DecisionRecord | undefined> {
  const row = await kysely(db).selectFrom('decisions').selectAll().where('id', '=', id).executeTakeFirst()
  return row && toDecision(row)
}

/**
 * Moves a pending decision to its outcome. Returns undefined when it was no longer pending: of two
 * racing answers exactly one wins.
 */
export async function resolveDecision(
  tx: Executor,
  id: string,
  outcome: {
    status: 'approved' | 'rejected' | 'expired'
    scope?: 'once' | 'session'
    decidedBy?: string
    note?: string
    reply?: DecisionReply
  },
): Promise<DecisionRecord | undefined> {
  const row = await kysely(tx)
    .updateTable('decisions')
    .set({
      status: outcome.status,
      scope: outcome.scope ?? null,
      decided_by: outcome.decidedBy ?? null,
      note: outcome.note ?? null,
      ...(outcome.reply && { reply: storableJson(outcome.reply as unknown as JsonValue) }),
      decided_at: new Date(),
    })
    .where('id', '=', id)
    .where('status', '=', 'pending')
    .returningAll()
    .executeTakeFirst()
  return row && toDecision(row)
}

/** A run's decisions still pending (to expire once the run has ended). */
export async function pendingDecisionIds(db: Executor, runId: string): Promise<string[]> {
  const rows = await kysely(db)
    .selectFrom('decisions')
    .select('id')
    .where('run_id', '=', runId)
    // A literal, not a parameter: a prepared statement's generic plan can then use the partial index.
    .where(sql<boolean>`status = 'pending'`)
    .execute()
  return rows.map((row) => row.id)
}

/** Pending decisions whose deadline is at or before `now`. */
export async function overdueDecisionIds(db: Executor, now: Date): Promise<string[]> {
  const overdue = await kysely(db)
    .selectFrom('decisions')
    .select('id')
    .where(sql<boolean>`status = 'pending'`)
    .where('expires_at', '<=', now)
    .execute()
  return overdue.map((row) => row.id)
}

/**
 * Decisions a user may see: their own, the calls of the projects given (not a conversation's: that is its
 * owner's alone), and what waits for them as a designated approver — newest first. Each of the three is
 * read through its own index (the first two newest first and at most a page), and the union makes the
 * page: one OR over the three walked the whole table's primary key once a prepared statement took its
 * generic plan.
 */
export async function listDecisions(
  db: Executor,
  filter: { userId: string; visibleProjectIds: string[]; status?: DecisionStatus; conversationId?: string },
  page: PageRequest,
): Promise<Page<DecisionRecord>> {
  const limit = page.limit + 1
  const narrowed = sql.join(
    [
      ...(filter.status ? [sql`status = ${filter.status}`] : []),
      ...(filter.conversationId ? [sql`conversation_id = ${filter.conversationId}`] : []),
      ...(page.after ? [sql`id < ${page.after}`] : []),
      sql`true`,
    ],
    sql` and `,
  )
  const newest = (which: RawBuilder<boolean>) =>
    sql`(select id from decisions where ${which} and ${narrowed} order by id desc limit ${limit})`
  const branches = [
    newest(sql`owner_id = ${filter.userId}`),
    ...(filter.visibleProjectIds.length > 0
      ? [newest(sql`project_id = any(${filter.visibleProjectIds}::text[]) and conversation_id is null`)]
      : []),
    // Through the approvers' GIN index, all of them: ordered and cut here, a generic plan would walk the
    // primary key instead, past every decision without approvers.
    sql`(select id from decisions where approvers @> ${storableJson([filter.userId])}::jsonb and ${narrowed})`,
  ]
  // The ids as an array first, then each row by its key (`in (…)` could be merge-joined along the key).
  const { rows } = await sql<DecisionRow>`select * from decisions
    where id = any(array(${sql.join(branches, sql` union `)})) order by id desc limit ${limit}`.execute(kysely(db))
  return toPage(rows.map(toDecision), page.limit)
}

export async function insertAllowance(
  tx: Executor,
  allowance: {
    id: string
    conversationId: string
    commandId: string
    paramsHash: string
    decisionId: string
    createdBy: string
    expiresAt: string
  },
): Promise<void> {
  await kysely(tx)
    .insertInto('allowances')
    .values({
      id: allowance.id,
      conversation_id: allowance.conversationId,
      command_id: allowance.commandId,
      params_hash: allowance.paramsHash,
      decision_id: allowance.decisionId,
      created_by: allowance.createdBy,
      expires_at: allowance.expiresAt,
    })
    .execute()
}

/** Whether a live session allowance covers exactly this command and these params in this conversation. */
export async function findAllowance(
  db: Executor,
  conversationId: string,
  commandId: string,
  paramsHash: string,
): Promise<{ decisionId: string } | undefined> {
  const row = await kysely(db)
    .selectFrom('allowances')
    .select('decision_id')
    .where('conversation_id', '=', conversationId)
    .where('command_id', '=', commandId)
    .where('params_hash', '=', paramsHash)
    .where('expires_at', '>', new Date())
    .executeTakeFirst()
  return row && { decisionId: row.decision_id }
}

/**
 * Whether a person said no to one of the run's calls: rejected or answered instead at a decision, or a
 * client tool (`propose_command`) declined (`accepted: false`), through the run's calls index.
 */
export async function hasRejectedCall(db: Executor, runId: string): Promise<boolean> {
  const row = await kysely(db)
    .selectFrom('run_tool_calls')
    .select('id')
    .where('run_id', '=', runId)
    .where((eb) =>
      eb.or([eb('status', '=', 'rejected'), eb.and([eb('kind', '=', 'client'), eb('status', '=', 'error')])]),
    )
    .limit(1)
    .executeTakeFirst()
  return row !== undefined
}

interface DecisionRow {
  id: string
  dispatch_id: string
  owner_id: string
  project_id: string | null
  conversation_id: string | null
  run_id: string | null
  call_id: string | null
  command_id: string
  params: JsonValue
  preview: string | null
  risk: string
  reasons: JsonValue
  status: DecisionStatus
  scope: 'once' | 'session' | null
  decided_by: string | null
  note: string | null
  created_at: Date
  expires_at: Date
  decided_at: Date | null
  approvers?: JsonValue | null
  kind?: 'approve' | 'connect'
  reply?: JsonValue | null
}

/** A decision row as `to_jsonb` renders it (inside a larger statement's result). */
export function decisionFromJson(json: { [key: string]: JsonValue }): DecisionRecord {
  const date = (value: JsonValue | undefined) => (typeof value === 'string' ? new Date(value) : null)
  return toDecision({
    ...(json as unknown as DecisionRow),
    created_at: date(json.created_at)!,
    expires_at: date(json.expires_at)!,
    decided_at: date(json.decided_at),
  })
}

function toDecision(row: DecisionRow): DecisionRecord {
  return {
    id: row.id,
    dispatchId: row.dispatch_id,
    ownerId: row.owner_id,
    projectId: row.project_id,
    conversationId: row.conversation_id,
    runId: row.run_id,
    callId: row.call_id,
    commandId: row.command_id,
    params: row.params,
    preview: row.preview,
    risk: row.risk,
    reasons: row.reasons as string[],
    status: row.status,
    scope: row.scope,
    decidedBy: row.decided_by,
    note: row.note,
    createdAt: row.created_at.toISOString(),
    expiresAt: row.expires_at.toISOString(),
    decidedAt: row.decided_at?.toISOString() ?? null,
    approvers: Array.isArray(row.approvers)
      ? row.approvers.filter((id: JsonValue): id is string => typeof id === 'string')
      : null,
    kind: row.kind ?? 'approve',
    reply: (row.reply as DecisionReply | null) ?? null,
  }
}

/** A user's pending `connect` decisions for commands under `prefix` (an MCP server's `mcp.<server>.`). */
export async function pendingConnectDecisions(db: Executor, ownerId: string, prefix: string): Promise<string[]> {
  const rows = await kysely(db)
    .selectFrom('decisions')
    .select('id')
    .where('owner_id', '=', ownerId)
    .where('status', '=', 'pending')
    .where('kind', '=', 'connect')
    .where(sql<boolean>`starts_with(command_id, ${prefix})`)
    .orderBy('created_at')
    .execute()
  return rows.map((row) => row.id)
}

/** The kind (`approve` or `connect`) of each of these decisions still pending; answered ones are left out. */
export async function pendingDecisionKinds(
  db: Executor,
  ids: readonly string[],
): Promise<Map<string, 'approve' | 'connect'>> {
  if (ids.length === 0) return new Map()
  const rows = await kysely(db)
    .selectFrom('decisions')
    .select(['id', 'kind'])
    .where('id', 'in', [...ids])
    .where('status', '=', 'pending')
    .execute()
  return new Map(rows.map((row) => [row.id, row.kind]))
}

/**
 * Reserves pending decisions on `commandIds` that no approvers were named for to `approverIds` (each
 * less its own requester): after a switch to `direct`, they would run on the server itself.
 */
export async function reservePendingDecisions(
  db: Executor,
  commandIds: readonly string[],
  approverIds: readonly string[],
): Promise<number> {
  if (commandIds.length === 0) return 0
  const result = await sql`
    update decisions d set approvers = coalesce(
      (select jsonb_agg(a) from jsonb_array_elements_text(${JSON.stringify(approverIds)}::jsonb) a where a <> d.owner_id),
      '[]'::jsonb)
    where d.status = 'pending' and d.approvers is null and d.command_id = any(${[...commandIds]}::text[])`.execute(
    kysely(db),
  )
  return Number(result.numAffectedRows ?? 0)
}
