import { sql } from 'kysely'
import { auditAppendCtes, type AuditEntryInput } from './audit-repository.js'
import type { JsonValue } from './database.js'
import { storableJson } from './storable.js'
import { kysely, type Executor } from './executor.js'

export type DispatchStatus =
  'requested' | 'awaiting_decision' | 'running' | 'succeeded' | 'failed' | 'rejected' | 'expired' | 'cancelled'

export interface DispatchActor {
  type: 'user' | 'agent' | 'schedule'
  id: string
  onBehalfOf: string
}

export interface DispatchRecord {
  id: string
  commandId: string
  plugin: string
  pluginVersion: string
  entrance: string
  actor: DispatchActor
  ownerId: string
  projectId: string | null
  conversationId: string | null
  runId: string | null
  callId: string | null
  idempotencyKey: string | null
  params: { [key: string]: JsonValue }
  paramsHash: string
  /** Hash of what an idempotency key stands for (null on rows written before it was recorded). */
  requestHash: string | null
  risk: string
  status: DispatchStatus
  decisionId: string | null
  result: JsonValue | null
  error: { code: string; message: string; [key: string]: JsonValue } | null
  createdAt: string
  updatedAt: string
}

export type NewDispatch = Omit<DispatchRecord, 'createdAt' | 'updatedAt' | 'decisionId' | 'result' | 'error'>

/** Inserts a dispatch; undefined when its idempotency key is taken (read the existing one instead). */
function dispatchValues(dispatch: NewDispatch) {
  return {
    id: dispatch.id,
    command_id: dispatch.commandId,
    plugin: dispatch.plugin,
    plugin_version: dispatch.pluginVersion,
    entrance: dispatch.entrance,
    actor: storableJson(dispatch.actor),
    owner_id: dispatch.ownerId,
    project_id: dispatch.projectId,
    conversation_id: dispatch.conversationId,
    run_id: dispatch.runId,
    call_id: dispatch.callId,
    idempotency_key: dispatch.idempotencyKey,
    params: storableJson(dispatch.params),
    params_hash: dispatch.paramsHash,
    request_hash: dispatch.requestHash,
    risk: dispatch.risk,
    status: dispatch.status,
  }
}

export async function insertDispatch(tx: Executor, dispatch: NewDispatch): Promise<DispatchRecord | undefined> {
  const row = await kysely(tx)
    .insertInto('dispatches')
    .values(dispatchValues(dispatch))
    .onConflict((conflict) =>
      conflict.columns(['owner_id', 'idempotency_key']).where('idempotency_key', 'is not', null).doNothing(),
    )
    .returningAll()
    .executeTakeFirst()
  return row && toDispatch(row)
}

/**
 * Inserts a dispatch and appends its audit entry in one statement; `undefined` (nothing written) when
 * its idempotency key is already taken.
 */
export async function insertDispatchAudited(
  tx: Executor,
  dispatch: NewDispatch,
  audit: AuditEntryInput,
): Promise<DispatchRecord | undefined> {
  const insert = kysely(tx)
    .insertInto('dispatches')
    .values(dispatchValues(dispatch))
    .onConflict((conflict) =>
      conflict.columns(['owner_id', 'idempotency_key']).where('idempotency_key', 'is not', null).doNothing(),
    )
    .returningAll()
  const { rows } =
    await sql<DispatchRow>`with d as (${insert}), ${auditAppendCtes(audit, 'd').sql} select d.* from d`.execute(
      kysely(tx),
    )
  const row = rows[0]
  return row && toDispatch(row)
}

export async function getDispatch(db: Executor, id: string): Promise<DispatchRecord | undefined> {
  const row = await kysely(db).selectFrom('dispatches').selectAll().where('id', '=', id).executeTakeFirst()
  return row && toDispatch(row)
}

export async function findDispatchByKey(
  db: Executor,
  ownerId: string,
  key: string,
): Promise<DispatchRecord | undefined> {
  const row = await kysely(db)
    .selectFrom('dispatches')
    .selectAll()
    .where('owner_id', '=', ownerId)
    .where('idempotency_key', '=', key)
    .executeTakeFirst()
  return row && toDispatch(row)
}

export type DispatchChange = {
  status: DispatchStatus
  risk?: string
  decisionId?: string
  result?: JsonValue
  error?: DispatchRecord['error']
  executor?: { id: string; expiresAt: Date }
}

/** A dispatch's change as a query (RETURNING the row), to ride in a larger statement. */
export function updateDispatchQuery(tx: Executor, id: string, change: DispatchChange) {
  return kysely(tx)
    .updateTable('dispatches')
    .set({
      status: change.status,
      ...(change.risk !== undefined && { risk: change.risk }),
      ...(change.decisionId !== undefined && { decision_id: change.decisionId }),
      ...(change.result !== undefined && { result: storableJson(change.result) }),
      ...(change.error !== undefined && { error: storableJson(change.error) }),
      ...(change.executor && { executor: change.executor.id, executor_expires_at: change.executor.expiresAt }),
      updated_at: new Date(),
    })
    .where('id', '=', id)
    .returningAll()
}

/** A person approved a dispatch with changed params (an `edit` answer): they are what runs. */
export async function replaceDispatchParams(
  tx: Executor,
  id: string,
  params: JsonValue,
  paramsHash: string,
): Promise<DispatchRecord> {
  const row = await kysely(tx)
    .updateTable('dispatches')
    .set({ params: storableJson(params), params_hash: paramsHash, updated_at: new Date() })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow()
  return toDispatch(row)
}

export async function updateDispatch(tx: Executor, id: string, change: DispatchChange): Promise<DispatchRecord> {
  return toDispatch(await updateDispatchQuery(tx, id, change).executeTakeFirstOrThrow())
}

/** Changes a dispatch and appends its audit entry in one statement (the row is locked before the chain). */
export async function updateDispatchAudited(
  tx: Executor,
  id: string,
  change: DispatchChange,
  audit: AuditEntryInput,
): Promise<DispatchRecord> {
  const { rows } =
    await sql<DispatchRow>`with d as (${updateDispatchQuery(tx, id, change)}), ${auditAppendCtes(audit, 'd').sql} select d.* from d`.execute(
      kysely(tx),
    )
  const row = rows[0]
  if (!row) throw new Error(`no dispatch ${id}`)
  return toDispatch(row)
}

interface DispatchRow {
  id: string
  command_id: string
  plugin: string
  plugin_version: string
  entrance: string
  actor: JsonValue
  owner_id: string
  project_id: string | null
  conversation_id: string | null
  run_id: string | null
  call_id: string | null
  idempotency_key: string | null
  params: JsonValue
  params_hash: string
  request_hash: string | null
  risk: string
  status: string
  decision_id: string | null
  result: JsonValue | null
  error: JsonValue | null
  created_at: Date
  updated_at: Date
}

function toDispatch(row: DispatchRow): DispatchRecord {
  return {
    id: row.id,
    commandId: row.command_id,
    plugin: row.plugin,
    pluginVersion: row.plugin_version,
    entrance: row.entrance,
    actor: row.actor as unknown as DispatchActor,
    ownerId: row.owner_id,
    projectId: row.project_id,
    conversationId: row.conversation_id,
    runId: row.run_id,
    callId: row.call_id,
    idempotencyKey: row.idempotency_key,
    params: row.params as { [key: string]: JsonValue },
    paramsHash: row.params_hash,
    requestHash: row.request_hash,
    risk: row.risk,
    status: row.status as DispatchStatus,
    decisionId: row.decision_id,
    result: row.result,
    error: row.error as DispatchRecord['error'],
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
  }
}

/** Renews the executor lease of every dispatch this process is running. */
export async function renewDispatchExecutor(db: Executor, executor: string, expiresAt: Date): Promise<void> {
  // Rows locked in id order before any is changed, as grouped dispatch steps lock the ones they finish.
  await sql`with l as (select id from dispatches where executor = ${executor} and status = 'running' order by id for no key update)
    update dispatches set executor_expires_at = ${expiresAt}
    where id in (select id from l) and (select count(*) from l) >= 0`.execute(kysely(db))
}

/**
 * Running dispatches nobody vouches for any more: their executor's lease has passed (or, with
 * `all`, every running one not run by `except` — on a database only this process uses).
 */
export async function findOrphanedDispatches(
  db: Executor,
  options: { all: boolean; except: string },
): Promise<DispatchRecord[]> {
  let query = kysely(db).selectFrom('dispatches').selectAll().where('status', '=', 'running')
  query = options.all
    ? query.where((eb) => eb.or([eb('executor', 'is', null), eb('executor', '!=', options.except)]))
    : query.where((eb) => eb.or([eb('executor_expires_at', 'is', null), eb('executor_expires_at', '<', new Date())]))
  return (await query.limit(500).execute()).map(toDispatch)
}

/**
 * Dispatches a person approved whose command never started: the approving process stopped between
 * the approval's commit and the command's start. Normally that gap is milliseconds; these have sat
 * since before `before` (or, with `all`, on a database only this process uses, any).
 */
export async function findApprovedUnstarted(
  db: Executor,
  options: { all: boolean; before: Date },
): Promise<DispatchRecord[]> {
  // The dispatches still waiting (a partial index: the predicate a literal, so a prepared statement's
  // generic plan uses it too), each decision looked up by its key: a join with the decisions of every
  // call ever approved read all of them on each sweep (67-126 ms with 100,000).
  let query = kysely(db)
    .selectFrom('dispatches')
    .selectAll('dispatches')
    .where(sql<boolean>`dispatches.status = 'awaiting_decision'`)
    .where(
      sql<boolean>`(select decisions.status from decisions where decisions.id = dispatches.decision_id) = 'approved'`,
    )
  if (!options.all) query = query.where('dispatches.updated_at', '<', options.before)
  return (await query.limit(500).execute()).map(toDispatch)
}

/** Who runs a dispatch and until when its lease holds (with its last change); `undefined` when absent. */
export async function dispatchExecution(
  db: Executor,
  id: string,
): Promise<{ executor: string | null; executorExpiresAt: Date | null; updatedAt: Date } | undefined> {
  const row = await kysely(db)
    .selectFrom('dispatches')
    .select(['executor', 'executor_expires_at', 'updated_at'])
    .where('id', '=', id)
    .executeTakeFirst()
  return row && { executor: row.executor, executorExpiresAt: row.executor_expires_at, updatedAt: row.updated_at }
}

/** Locks a dispatch row for the rest of the transaction and reads it. */
export async function lockDispatch(tx: Executor, id: string): Promise<DispatchRecord | undefined> {
  const row = await kysely(tx)
    .selectFrom('dispatches')
    .selectAll()
    .where('id', '=', id)
    .forNoKeyUpdate()
    .executeTakeFirst()
  return row && toDispatch(row)
}
