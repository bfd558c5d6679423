import { sql, type Selectable, type Updateable } from 'kysely'
import type { Database, JsonValue, RunPhase, RunStatus } from './database.js'
import type { NewEvent } from './event-log.js'
import type { MessagePart } from './transcript-repository.js'
import type { ModelParams } from './project-repository.js'
import { storableJson } from './storable.js'
import { RunMoveRefused, type RunMove } from './run-states.js'
import { kysely, type Executor } from './executor.js'

export interface Run {
  id: string
  conversationId: string
  projectId: string
  ownerId: string
  model: string
  status: RunStatus
  phase: RunPhase | null
  iteration: number
  maxIterations: number
  approvalPolicy: 'ask' | 'dontAsk'
  clientTools: JsonValue
  requiredAction: JsonValue | null
  error: JsonValue | null
  usage: RunUsage
  /** The most it may spend (checked before each model call); null: no limit. */
  budget: RunBudget | null
  cancelReason: string | null
  createdAt: string
  updatedAt: string
  startedAt: string | null
  endedAt: string | null
  /** Knowledge put in front of the model: null until computed, `{autoInject: false}` when turned off. */
  knowledge: JsonValue | null
  /** The project's profile as the run started with it, with the run's parameter overrides. */
  profile: RunProfile
  /** The fencing token of the instance driving the run (null when nobody holds it). */
  leaseOwner: string | null
  leaseExpiresAt: string | null
  /** Automatic resumes after a crash or shutdown so far. */
  resumes: number
  /** Since when the run waits for humans or client tools (its action TTL runs from here). */
  waitingSince: string | null
  /** `quota`: queued because a run quota was full (queue mode), started by the quota promoter. */
  queuedFor: 'quota' | null
  /** The final answer parsed and validated against `profile.output`'s schema (null: none asked, or not yet). */
  output: JsonValue | null
  /** While final answers fail `profile.output`'s schema: how many did, and what failed in the last. */
  outputRepair: OutputRepair | null
  /** Its place among the runs queued for the same user's or project's quota (1: next), when computed. */
  queuePosition?: number
}

/** What a run was started with: the project's prompt and tool subset, the effective parameters. */
export interface RunProfile {
  systemPrompt: string | null
  modelParams: ModelParams
  tools: string[] | null
  /** Whose published knowledge automatic injection may use besides the run owner's own (absent on older runs: the owner's only). */
  injectFrom?: { projectOwnerId: string; members: boolean }
  /** The schema its final answer must follow (the request's `output`). */
  output?: OutputSpec
  /** `false`: no memories are recalled into its prompt (the run's or the project's switch). */
  memoryRecall?: false
}

/** A run request's `output` (docs/guides/agent-runs.md#structured-output). */
export interface OutputSpec {
  schema: { [key: string]: JsonValue }
  name: string
  strict: boolean
  /** Answers after the first that may be asked for when one fails validation. */
  maxRepairs: number
}

export interface OutputRepair {
  attempts: number
  errors: string[]
}

export const activeRunStatuses: RunStatus[] = ['queued', 'running', 'requires_action']

export const terminalRunStatuses: RunStatus[] = ['completed', 'failed', 'cancelled', 'expired']

export interface NewRun {
  conversationId: string
  projectId: string
  ownerId: string
  model: string
  maxIterations: number
  approvalPolicy: 'ask' | 'dontAsk'
  clientTools: JsonValue
  input: string
  /** The user message's parts when it has more than text (images); `input` is its text. */
  parts?: MessagePart[]
  /** `{autoInject: false}` turns knowledge injection off for this run. */
  knowledge?: JsonValue | null
  profile?: RunProfile
  budget?: RunBudget | null
  /** The new run as its `run.created` event shows it: the API's view, which is not the store's to define. */
  view: (run: Run) => { [key: string]: JsonValue }
}

/** The events of a new run: created, its user message, and (when it starts at once) its status. */
export function runStartEvents(
  run: Run,
  messageId: string,
  input: Pick<NewRun, 'input' | 'view' | 'parts'>,
  started: boolean,
): NewEvent[] {
  return [
    runEvent(run, 'run.created', { run: input.view(run) }),
    runEvent(run, 'message.created', { messageId, role: 'user' }),
    runEvent(run, 'message.completed', {
      messageId,
      content: input.input,
      toolCalls: null,
      status: 'completed',
      ...(input.parts && { parts: input.parts as unknown as JsonValue }),
    }),
    ...(started ? [runEvent(run, 'run.status', { runId: run.id, status: run.status, phase: run.phase })] : []),
  ]
}

export async function getRun(db: Executor, id: string): Promise<Run | undefined> {
  const row = await kysely(db).selectFrom('runs').selectAll().where('id', '=', id).executeTakeFirst()
  return row && toRun(row)
}

/** Whether a later run was started in the run's conversation (its messages came after this run's). */
export async function laterRunExists(db: Executor, run: Pick<Run, 'id' | 'conversationId'>): Promise<boolean> {
  const row = await kysely(db)
    .selectFrom('runs')
    .select('id')
    .where('conversation_id', '=', run.conversationId)
    .where('id', '>', run.id)
    .limit(1)
    .executeTakeFirst()
  return row !== undefined
}

/** Locks a run row for a state change (the caller is in a transaction). */
export async function lockRun(tx: Executor, id: string): Promise<Run | undefined> {
  const row = await kysely(tx).selectFrom('runs').selectAll().where('id', '=', id).forNoKeyUpdate().executeTakeFirst()
  return row && toRun(row)
}

export interface RunPatch {
  /** A status change, declared against the run state machine (`run-states.ts`): only listed moves compile. */
  move?: RunMove
  phase?: RunPhase | null
  iteration?: number
  requiredAction?: JsonValue | null
  error?: JsonValue | null
  usage?: RunUsage
  budget?: RunBudget | null
  cancelReason?: string | null
  started?: boolean
  ended?: boolean
  lease?: { owner: string; expiresAt: Date } | null
  knowledge?: JsonValue | null
  /** Set to now when the run starts waiting for humans or client tools; null when it stops. */
  waiting?: boolean
  output?: JsonValue | null
  outputRepair?: OutputRepair | null
}

/**
 * Updates a run. A patch with a `move` changes the status only from a state the move lists: checked in
 * the statement itself, so a run that moved on since the caller read it is refused (`RunMoveRefused`),
 * never moved along an edge the table does not have.
 */
export async function updateRun(tx: Executor, id: string, patch: RunPatch): Promise<Run> {
  let update = kysely(tx).updateTable('runs').set(patchColumns(patch)).where('id', '=', id)
  if (patch.move) update = update.where('status', 'in', patch.move.from)
  const row = await update.returningAll().executeTakeFirst()
  if (!row) {
    if (patch.move) throw new RunMoveRefused(id, patch.move)
    throw new Error(`run ${id} not found`)
  }
  return toRun(row)
}

/** The columns a patch sets (and `updated_at`). */
export function patchColumns(patch: RunPatch): Updateable<Database['runs']> {
  return {
    updated_at: new Date(),
    ...(patch.move !== undefined && { status: patch.move.to }),
    ...(patch.phase !== undefined && { phase: patch.phase }),
    ...(patch.iteration !== undefined && { iteration: patch.iteration }),
    ...(patch.requiredAction !== undefined && {
      required_action: patch.requiredAction === null ? null : storableJson(patch.requiredAction),
    }),
    ...(patch.error !== undefined && { error: patch.error === null ? null : storableJson(patch.error) }),
    ...(patch.usage !== undefined && { usage: storableJson(patch.usage) }),
    ...(patch.budget !== undefined && { budget: patch.budget === null ? null : storableJson(patch.budget) }),
    ...(patch.cancelReason !== undefined && { cancel_reason: patch.cancelReason }),
    ...(patch.started && { started_at: new Date() }),
    ...(patch.ended && { ended_at: new Date() }),
    ...(patch.lease !== undefined && {
      lease_owner: patch.lease?.owner ?? null,
      lease_expires_at: patch.lease?.expiresAt ?? null,
    }),
    ...(patch.knowledge !== undefined && {
      knowledge: patch.knowledge === null ? null : storableJson(patch.knowledge),
    }),
    ...(patch.waiting !== undefined && { waiting_since: patch.waiting ? new Date() : null }),
    ...(patch.output !== undefined && { output: patch.output === null ? null : storableJson(patch.output) }),
    ...(patch.outputRepair !== undefined && {
      output_repair: patch.outputRepair === null ? null : storableJson(patch.outputRepair as unknown as JsonValue),
    }),
  }
}

/** The oldest queued run of a conversation, if no other run there is active. */
export async function nextQueuedRun(db: Executor, conversationId: string): Promise<Run | undefined> {
  const rows = await kysely(db)
    .selectFrom('runs')
    .selectAll()
    .where('conversation_id', '=', conversationId)
    .where('status', 'in', activeRunStatuses)
    .orderBy('id')
    .execute()
  if (rows.some((row) => row.status !== 'queued')) return undefined
  const first = rows[0]
  // One waiting for a quota is started by the quota promoter, when there is room.
  return first && first.queued_for === null ? toRun(first) : undefined
}

/** Once `runId` has ended: the next queued run of its conversation, if nothing else there is active (one query). */
export async function nextQueuedRunAfterEnd(db: Executor, runId: string): Promise<Run | undefined> {
  const rows = await kysely(db)
    .selectFrom('runs')
    .selectAll()
    .where('conversation_id', '=', (eb) =>
      eb
        .selectFrom('runs as ended')
        .select('ended.conversation_id')
        .where('ended.id', '=', runId)
        .where('ended.status', 'in', terminalRunStatuses),
    )
    .where('status', 'in', activeRunStatuses)
    .orderBy('id')
    .execute()
  if (rows.some((row) => row.status !== 'queued')) return undefined
  const first = rows[0]
  return first && first.queued_for === null ? toRun(first) : undefined
}

/** Running runs whose lease ran out or was released (their driver stopped), for the sweeper. */
export async function findRunsWithExpiredLease(db: Executor, now: Date): Promise<Run[]> {
  const rows = await kysely(db)
    .selectFrom('runs')
    .selectAll()
    .where('status', '=', 'running')
    .where((eb) => eb.or([eb('lease_expires_at', 'is', null), eb('lease_expires_at', '<', now)]))
    .orderBy('id')
    .limit(500)
    .execute()
  return rows.map(toRun)
}

/** Runs waiting (for humans or client tools) since before `since`. */
export async function findRunsWaitingSince(db: Executor, since: Date): Promise<Run[]> {
  const rows = await kysely(db)
    .selectFrom('runs')
    .selectAll()
    .where('status', '=', 'requires_action')
    .where('waiting_since', '<', since)
    // Only what still waits for a person (a decision, a client's output): a run whose approved calls
    // are running waits for them, within their command's timeout. Literals: partial indexes.
    .where((eb) =>
      eb.or([
        eb.exists(
          eb
            .selectFrom('decisions as d')
            .select('d.id')
            .whereRef('d.run_id', '=', 'runs.id')
            .where(sql<boolean>`d.status = 'pending'`),
        ),
        eb.exists(
          eb
            .selectFrom('run_tool_calls as c')
            .select('c.id')
            .whereRef('c.run_id', '=', 'runs.id')
            .where(sql<boolean>`c.status = 'awaiting_output'`),
        ),
      ]),
    )
    .orderBy('id')
    .limit(500)
    .execute()
  return rows.map(toRun)
}

/**
 * Models that projects (their default) or unfinished runs name and that are not in `configured`, with
 * how many of each name them: warned about at start, so removing a model is never silent.
 */
export async function modelsNamedButMissing(
  db: Executor,
  configured: readonly string[],
): Promise<Array<{ model: string; projects: number; runs: number }>> {
  const { rows } = await sql<{ model: string; projects: string | number; runs: string | number }>`
    select model, sum(projects) as projects, sum(runs) as runs from (
      select default_model as model, count(*) as projects, 0 as runs from projects where default_model is not null group by default_model
      union all
      select model, 0 as projects, count(*) as runs from runs where status in ('queued', 'running', 'requires_action') group by model
    ) named
    group by model order by model`.execute(kysely(db))
  const known = new Set(configured)
  return rows
    .filter((row) => !known.has(row.model))
    .map((row) => ({ model: row.model, projects: Number(row.projects), runs: Number(row.runs) }))
}

/** Conversations whose oldest queued run could start (nothing else there is active), e.g. after a restart. */
export async function findStartableQueues(db: Executor): Promise<string[]> {
  const { rows } = await sql<{ conversation_id: string }>`
    select distinct q.conversation_id from runs q
    where q.status = 'queued'
      and not exists (select 1 from runs a where a.conversation_id = q.conversation_id and a.status in ('running', 'requires_action'))
    limit 500`.execute(kysely(db))
  return rows.map((row) => row.conversation_id)
}

/**
 * The fence of every write a run's driver makes: renews the lease and locks the row, but only while
 * `owner` still holds it and the run is running. Undefined means the lease has passed to someone else
 * (or the run ended elsewhere): the caller must stop without writing.
 */
export async function fenceRun(
  tx: Executor,
  id: string,
  owner: string,
  expiresAt: Date,
  patch?: RunPatch,
): Promise<Run | undefined> {
  // With a patch, the state change rides in the same statement as the fence (a patch that ends the
  // run also gives the lease up).
  const row = await kysely(tx)
    .updateTable('runs')
    .set({ lease_expires_at: expiresAt, ...(patch && patchColumns(patch)) })
    .where('id', '=', id)
    .where('lease_owner', '=', owner)
    .where('status', '=', 'running')
    .returningAll()
    .executeTakeFirst()
  return row && toRun(row)
}

/** The heartbeat: true while `owner` still holds the lease. */
export async function renewLease(db: Executor, id: string, owner: string, expiresAt: Date): Promise<boolean> {
  const result = await kysely(db)
    .updateTable('runs')
    .set({ lease_expires_at: expiresAt })
    .where('id', '=', id)
    .where('lease_owner', '=', owner)
    .where('status', '=', 'running')
    .executeTakeFirst()
  return Number(result.numUpdatedRows) > 0
}

/** Gives a running run's lease up (graceful shutdown): the next sweeper, here or elsewhere, resumes it. */
export async function releaseLease(tx: Executor, id: string, owner: string): Promise<boolean> {
  const result = await kysely(tx)
    .updateTable('runs')
    .set({ lease_owner: null, lease_expires_at: null })
    .where('id', '=', id)
    .where('lease_owner', '=', owner)
    .where('status', '=', 'running')
    .executeTakeFirst()
  return Number(result.numUpdatedRows) > 0
}

/**
 * Takes a running run over from a driver that stopped: succeeds only if, under the row lock, the run
 * is still running and its lease still passed (`before`) — the check a sweeper racing a heartbeat needs.
 * Counts the resume toward `maxResumes` when the lease ran out (its driver died), not when it was
 * released (a graceful stop, or a lost database): a rolling restart is not the run's doing.
 */
export async function takeOverRun(
  tx: Executor,
  id: string,
  lease: { owner: string; expiresAt: Date },
  before: Date,
): Promise<Run | undefined> {
  const row = await kysely(tx)
    .updateTable('runs')
    .set(() => ({
      lease_owner: lease.owner,
      lease_expires_at: lease.expiresAt,
      resumes: sql<number>`case when lease_expires_at is null then resumes else resumes + 1 end`,
      updated_at: new Date(),
    }))
    .where('id', '=', id)
    .where('status', '=', 'running')
    .where((eb) => eb.or([eb('lease_expires_at', 'is', null), eb('lease_expires_at', '<', before)]))
    .returningAll()
    .executeTakeFirst()
  return row && toRun(row)
}

/** Runs left waiting with nothing awaited any more (a stop between the last answer and the resume). */
export async function findAnsweredWaitingRuns(db: Executor): Promise<Run[]> {
  const rows = await kysely(db)
    .selectFrom('runs as r')
    .selectAll('r')
    .where('r.status', '=', 'requires_action')
    .where((eb) =>
      eb.not(
        eb.exists(
          eb
            .selectFrom('run_tool_calls as c')
            .select('c.id')
            .whereRef('c.run_id', '=', 'r.id')
            .where('c.status', 'in', ['pending', 'running', 'awaiting_decision', 'awaiting_output']),
        ),
      ),
    )
    .limit(500)
    .execute()
  return rows.map(toRun)
}

/** The active run (queued, running or waiting) of each conversation that has one. */
export async function activeRunIds(db: Executor, conversationIds: readonly string[]): Promise<Map<string, string>> {
  if (conversationIds.length === 0) return new Map()
  const rows = await kysely(db)
    .selectFrom('runs')
    .select(['conversation_id', 'id'])
    .where('conversation_id', 'in', [...conversationIds])
    .where('status', 'in', activeRunStatuses)
    .orderBy('id')
    .execute()
  const active = new Map<string, string>()
  // A queued run waits behind the running one: the first active run is the one that is active now.
  for (const row of rows) if (!active.has(row.conversation_id)) active.set(row.conversation_id, row.id)
  return active
}

/** Runs newest first: of one conversation, or of an owner in some projects; optionally by status. */
export async function listRuns(
  db: Executor,
  filter: {
    conversationId?: string
    ownerId?: string
    projectIds?: readonly string[]
    statuses?: readonly RunStatus[]
    /** Only runs whose conversation is not deleted or purged (what the caller may still open). */
    openConversations?: boolean
  },
  page: { limit: number; after?: string },
): Promise<{ items: Run[]; nextCursor: string | null }> {
  let query = kysely(db)
    .selectFrom('runs')
    .selectAll()
    .orderBy('id', 'desc')
    .limit(page.limit + 1)
  if (filter.conversationId) query = query.where('conversation_id', '=', filter.conversationId)
  if (filter.ownerId) query = query.where('owner_id', '=', filter.ownerId)
  if (filter.projectIds) {
    if (filter.projectIds.length === 0) return { items: [], nextCursor: null }
    query = query.where('project_id', 'in', [...filter.projectIds])
  }
  if (filter.statuses && filter.statuses.length > 0) query = query.where('status', 'in', [...filter.statuses])
  // A literal, not a parameter: a prepared statement's generic plan can then use the partial index
  // (`runs_owner_listed_idx`; with `= $n` a deep page took 454 ms instead of 0.3).
  if (filter.openConversations) query = query.where(sql<boolean>`not conversation_deleted`)
  if (page.after) query = query.where('id', '<', page.after)
  const rows = (await query.execute()).map(toRun)
  const items = rows.slice(0, page.limit)
  return { items, nextCursor: rows.length > page.limit ? (items.at(-1)?.id ?? null) : null }
}

// --- events ------------------------------------------------------------------------------------

/** An event on the run, conversation and project streams. */
export function runEvent(
  run: Pick<Run, 'id' | 'conversationId' | 'projectId' | 'ownerId'>,
  type: string,
  data: { [key: string]: unknown },
): NewEvent {
  return {
    type,
    runId: run.id,
    conversationId: run.conversationId,
    projectId: run.projectId,
    userId: run.ownerId,
    data,
  }
}

/** A `runs` row as Kysely reads it (the generated table type, refined in database.ts). */
export type RunRow = Selectable<Database['runs']>

/** A run row as `to_jsonb` renders it (inside a larger statement's result). */
export function runFromJson(json: { [key: string]: JsonValue }): Run {
  const date = (value: JsonValue | undefined) => (typeof value === 'string' ? new Date(value) : null)
  const row = json as unknown as RunRow
  return toRun({
    ...row,
    created_at: date(json.created_at)!,
    updated_at: date(json.updated_at)!,
    started_at: date(json.started_at),
    ended_at: date(json.ended_at),
    lease_expires_at: date(json.lease_expires_at),
    waiting_since: date(json.waiting_since),
  })
}

export function toRun(row: RunRow): Run {
  return {
    id: row.id,
    conversationId: row.conversation_id,
    projectId: row.project_id,
    ownerId: row.owner_id,
    model: row.model,
    status: row.status,
    phase: row.phase,
    iteration: row.iteration,
    maxIterations: row.max_iterations,
    approvalPolicy: row.approval_policy,
    clientTools: row.client_tools,
    requiredAction: row.required_action,
    error: row.error,
    usage: runUsage(row.usage),
    budget: runBudget(row.budget),
    cancelReason: row.cancel_reason,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
    startedAt: row.started_at?.toISOString() ?? null,
    endedAt: row.ended_at?.toISOString() ?? null,
    knowledge: row.knowledge,
    profile: toProfile(row.profile),
    leaseOwner: row.lease_owner,
    leaseExpiresAt: row.lease_expires_at?.toISOString() ?? null,
    resumes: row.resumes,
    waitingSince: row.waiting_since?.toISOString() ?? null,
    queuedFor: row.queued_for === 'quota' ? 'quota' : null,
    output: row.output ?? null,
    outputRepair: (row.output_repair as OutputRepair | null) ?? null,
  }
}

function toProfile(value: JsonValue | null): RunProfile {
  const profile = (value && typeof value === 'object' && !Array.isArray(value) ? value : {}) as Partial<RunProfile>
  const from = profile.injectFrom
  return {
    systemPrompt: profile.systemPrompt ?? null,
    modelParams: profile.modelParams ?? {},
    tools: profile.tools ?? null,
    ...(from &&
      typeof from.projectOwnerId === 'string' && {
        injectFrom: { projectOwnerId: from.projectOwnerId, members: from.members === true },
      }),
    ...(profile.output && typeof profile.output.schema === 'object' && { output: profile.output }),
    ...(profile.memoryRecall === false && { memoryRecall: false as const }),
  }
}
/**
 * What a run's model calls used (docs/guides/operating.md#usage-and-cost): tokens as the provider counted
 * them (input includes cached input), calls made, and cost in the configured currency — null when a call
 * was made with a model that has no price (or none was made yet).
 */
// A type, not an interface: it is stored as JSON (JsonValue needs the implicit index signature).
export type UsageTotals = {
  inputTokens: number
  outputTokens: number
  cachedInputTokens: number
  reasoningTokens: number
  modelCalls: number
  cost: number | null
}

/** A run's usage: its totals, and the same split by the model that answered each call. */
export type RunUsage = UsageTotals & { byModel?: { [model: string]: UsageTotals } }

/** The most a run may spend; each limit optional (docs/guides/operating.md#budgets). */
export type RunBudget = {
  maxModelCalls?: number
  maxTokens?: number
  /** In the configured currency. */
  maxCost?: number
}

/** A stored budget (null: none). */
export function runBudget(stored: unknown): RunBudget | null {
  if (stored === null || typeof stored !== 'object') return null
  const value = stored as Record<string, unknown>
  const budget: RunBudget = {}
  for (const key of ['maxModelCalls', 'maxTokens', 'maxCost'] as const)
    if (typeof value[key] === 'number') budget[key] = value[key]
  return Object.keys(budget).length > 0 ? budget : null
}

/** A run's usage before anything was called. */
export const noUsage: RunUsage = {
  inputTokens: 0,
  outputTokens: 0,
  cachedInputTokens: 0,
  reasoningTokens: 0,
  modelCalls: 0,
  cost: null,
}

/** One model call's usage and cost (null: no price), as counted into a run's and recorded per call. */
export type ModelCallUsage = Omit<UsageTotals, 'modelCalls'>

/**
 * A sum of costs as a person would write it: binary floating point makes 5 × 0.0012 read
 * 0.005999999999999999; twelve decimals are finer than any currency's use.
 */
export function roundCost(cost: number): number {
  return Math.round(cost * 1e12) / 1e12
}

/** Totals with one more call: the cost stays null once a call had no price. */
function addCall(totals: UsageTotals, call: ModelCallUsage): UsageTotals {
  return {
    inputTokens: totals.inputTokens + call.inputTokens,
    outputTokens: totals.outputTokens + call.outputTokens,
    cachedInputTokens: totals.cachedInputTokens + call.cachedInputTokens,
    reasoningTokens: totals.reasoningTokens + call.reasoningTokens,
    modelCalls: totals.modelCalls + 1,
    cost:
      call.cost === null || (totals.modelCalls > 0 && totals.cost === null)
        ? null
        : roundCost((totals.cost ?? 0) + call.cost),
  }
}

/** A run's usage with one more call, answered by `model` (counted in its `byModel` share too). */
export function withModelCall(usage: RunUsage, call: ModelCallUsage, model: string): RunUsage {
  const { byModel, ...totals } = usage
  return {
    ...addCall(totals, call),
    byModel: { ...byModel, [model]: addCall(byModel?.[model] ?? noUsage, call) },
  }
}

/** A stored usage, read whole (rows written before calls and cost were counted lack those fields). */
export function runUsage(stored: unknown): RunUsage {
  const value = (stored ?? {}) as Partial<Record<keyof RunUsage, unknown>>
  const count = (field: unknown): number => (typeof field === 'number' && Number.isFinite(field) ? field : 0)
  const totals = (from: Partial<Record<keyof UsageTotals, unknown>>): UsageTotals => ({
    inputTokens: count(from.inputTokens),
    outputTokens: count(from.outputTokens),
    cachedInputTokens: count(from.cachedInputTokens),
    reasoningTokens: count(from.reasoningTokens),
    modelCalls: count(from.modelCalls),
    cost: typeof from.cost === 'number' && Number.isFinite(from.cost) ? from.cost : null,
  })
  const byModel = value.byModel
  return {
    ...totals(value),
    ...(byModel && typeof byModel === 'object'
      ? {
          byModel: Object.fromEntries(
            Object.entries(byModel as Record<string, Partial<Record<keyof UsageTotals, unknown>>>).map(
              ([model, share]) => [model, totals(share ?? {})],
            ),
          ),
        }
      : {}),
  }
}
