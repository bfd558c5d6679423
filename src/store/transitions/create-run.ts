import { sql } from 'kysely'
import type { JsonValue } from '../database.js'
import { compactionFromJson, latestCompactionRead, type Compaction } from '../compaction-repository.js'
import { eventFromJson, eventLogLock, eventsChannel, eventValues, type EventRecord } from '../event-log.js'
import { kysely, type Executor } from '../executor.js'
import { newId } from '../ids.js'
import { hasKnowledgeRead } from '../knowledge-repository.js'
import { hasMemoriesRead } from '../memory-repository.js'
import { noUsage, runFromJson, runStartEvents, toRun, type NewRun, type Run, type RunRow } from '../run-repository.js'
import type { RunCreatedStatus } from '../run-states.js'
import { storableJson } from '../storable.js'
import {
  messageCountRead,
  transcriptAfterRead,
  transcriptRowsFromJson,
  transcriptTailRead,
  type TranscriptRow,
} from '../transcript-repository.js'
import { runQuotaCheck, type RunQuotaLimits } from '../run-quota-repository.js'
import { outboxAfter } from '../webhook-outbox.js'
import type { Lease } from './lease.js'

/** What the driver of a run that starts at once will read first, read in the same statement. */
export interface RunPrefetch {
  /** The transcript window's size (see `readTranscriptTail`). */
  maxChars: number
  maxRows?: number
  /**
   * The caller holds the window from `firstId` through `lastId` (a kept window): only the messages
   * after it are read, and how many messages are in its range now (`Prefetched.keptCount`).
   */
  kept?: { firstId: string; lastId: string }
}

export interface Prefetched {
  /**
   * The conversation's tail as `readTranscriptTail` would read it just after (more rows may need
   * cutting); with `kept`, the messages after it (`readTranscriptAfter`), the run's own last.
   */
  transcript: TranscriptRow[]
  /** With `kept`: how many messages its range holds now (as many as the caller holds, unless one landed there since). */
  keptCount?: number
  /** Whether the project has knowledge to retrieve. */
  hasKnowledge: boolean
  /** Whether the run's user or its project has memories to recall. */
  hasMemories: boolean
  /** The conversation's newest compaction (null: none), as `latestCompaction` would read it. */
  compaction: Compaction | null
}

export interface CreateRunOptions {
  /** The lease of the run's driver, should it start at once. */
  lease: Lease
  /** With another run queued or active: queue this one (true) or report that run (false). */
  allowQueue: boolean
  /** A run quota is full (queue mode): the run is queued even in an idle conversation, for the promoter. */
  queueForQuota?: boolean
  /**
   * The quotas the run is counted against once more as it is written, under its user's and project's
   * locks, so that runs asked for at the same moment pass no further than a limit; over one the
   * statement writes nothing and throws (`isRunQuotaFull`). With `queueForQuota`, the limit on the
   * user's runs waiting for a quota.
   */
  quota?: RunQuotaLimits
  prefetch?: RunPrefetch
}

/** A run created (running, or queued behind another), or the conversation's active run. */
export type CreatedRun = { run: Run; events: EventRecord[]; prefetched?: Prefetched } | { active: Run; events: [] }

/**
 * (new) → running, or (new) → queued: a user message's run, with that message and its events, in ONE
 * statement. It starts at once when the conversation has no run queued, running or waiting; otherwise
 * it is queued behind them (`allowQueue`), or nothing is written and the oldest of them is returned.
 *
 * Two statements racing to start a run in an idle conversation both read it idle; the one-active-run
 * index refuses the second (a unique violation, `isOneActiveRunViolation`), whose caller runs the
 * statement again and now finds the first. A run queued while the active one ends unseen stays queued
 * until someone looks again (`DriverPool.startNext`).
 */
export async function createRun(
  db: Executor,
  input: NewRun,
  options: CreateRunOptions,
  tag: string,
): Promise<CreatedRun> {
  const now = new Date()
  const { lease } = options
  // The row as the database will hold it, either way, so the run (and run.created) needs no read back.
  const running: RunRow = {
    id: newId(),
    conversation_id: input.conversationId,
    project_id: input.projectId,
    owner_id: input.ownerId,
    model: input.model,
    status: 'running' satisfies RunCreatedStatus,
    phase: 'thinking',
    iteration: 0,
    max_iterations: input.maxIterations,
    approval_policy: input.approvalPolicy,
    client_tools: input.clientTools,
    required_action: null,
    error: null,
    usage: noUsage,
    budget: input.budget ?? null,
    cancel_reason: null,
    created_at: now,
    updated_at: now,
    started_at: now,
    ended_at: null,
    knowledge: input.knowledge ?? null,
    profile: (input.profile as unknown as JsonValue) ?? null,
    lease_owner: lease.owner,
    lease_expires_at: lease.expiresAt,
    resumes: 0,
    conversation_deleted: false,
    waiting_since: null,
    queued_for: null,
    output: null,
    output_repair: null,
  }
  const forQuota = options.queueForQuota === true
  const { quota } = options
  const queued: RunRow = {
    ...running,
    queued_for: forQuota ? 'quota' : null,
    status: 'queued' satisfies RunCreatedStatus,
    phase: null,
    started_at: null,
    lease_owner: null,
    lease_expires_at: null,
  }
  const messageId = newId()
  const startedEvents = runStartEvents(toRun(running), messageId, input, true)
  const queuedEvents = runStartEvents(toRun(queued), messageId, input, false)
  const json = (value: JsonValue | null) => (value === null ? null : storableJson(value))
  const { prefetch } = options
  const { rows } = await sql<{
    status: 'running' | 'queued' | null
    active: { [key: string]: JsonValue } | null
    events: Array<{ [key: string]: JsonValue }> | null
    transcript?: unknown
    has_knowledge?: boolean | null
    has_memories?: boolean | null
    input_size?: number | string | null
    compaction?: unknown
    kept_count?: number | string | null
  }>`
    with a as (
      select (select to_jsonb(o.*) from runs o where o.conversation_id = ${input.conversationId}
                and o.status in ('queued', 'running', 'requires_action') order by o.id limit 1) as active
    ),
    s as (select a.active is null and not ${forQuota}::boolean as starts from a),
    r as (
      insert into runs (id, conversation_id, project_id, owner_id, model, status, phase, iteration, max_iterations, approval_policy,
                        client_tools, usage, budget, created_at, updated_at, started_at, knowledge, profile, lease_owner, lease_expires_at, queued_for)
      select ${running.id}, ${running.conversation_id}, ${running.project_id}, ${running.owner_id}, ${running.model},
             case when s.starts then 'running' else 'queued' end, case when s.starts then 'thinking' end,
             0, ${running.max_iterations}::int, ${running.approval_policy}, ${json(running.client_tools)}::jsonb,
             ${json(running.usage)}::jsonb, ${json(running.budget)}::jsonb, ${now}::timestamptz, ${now}::timestamptz,
             case when s.starts then ${now}::timestamptz end, ${json(running.knowledge)}::jsonb, ${json(running.profile)}::jsonb,
             case when s.starts then ${lease.owner} end, case when s.starts then ${lease.expiresAt}::timestamptz end,
             ${queued.queued_for}::text
      from a, s where a.active is null or ${options.allowQueue}::boolean
      returning id, status
    ),
    m as (
      insert into messages (id, conversation_id, run_id, role, content, status, parts)
      select ${messageId}, ${input.conversationId}, r.id, 'user', ${input.input}, 'completed',
             ${input.parts ? storableJson(input.parts as unknown as JsonValue) : null}::jsonb from r returning id
    ),
    -- The first reads of a started run's driver, made before the event log's lock is taken (not while holding it).
    pre as (
      select ${prefetch ? sql`(${transcriptRead(input.conversationId, prefetch)})` : sql`null::json`} as transcript,
             ${prefetch ? hasKnowledgeRead(input.projectId) : sql`null::boolean`} as has_knowledge,
             ${prefetch ? hasMemoriesRead(input.ownerId, input.projectId) : sql`null::boolean`} as has_memories, length(${input.input}::text) + 64 as input_size,
             ${prefetch ? latestCompactionRead(input.conversationId) : sql`null::jsonb`} as compaction,
             ${prefetch?.kept ? messageCountRead(input.conversationId, prefetch.kept.firstId, prefetch.kept.lastId) : sql`null::int`} as kept_count
      from s where s.starts
    ),
    -- The quotas counted afresh under the user's and project's locks, before the event log's lock (not while holding it).
    q as (select ${quota ? runQuotaCheck(running.id, input.ownerId, input.projectId, quota) : sql`true`} as ok from r),
    lk as (select pg_advisory_xact_lock(${eventLogLock}) as locked from r, q where (select count(*) from m) >= 0 and (select count(*) from pre) >= 0),
    e as (
      insert into events (type, project_id, conversation_id, run_id, user_id, data, size)
      select v.type, v.project_id, v.conversation_id, v.run_id, v.user_id, v.data, v.size from lk, r, ${eventValues(startedEvents)} where r.status = 'running'
      union all
      select v.type, v.project_id, v.conversation_id, v.run_id, v.user_id, v.data, v.size from lk, r, ${eventValues(queuedEvents)} where r.status = 'queued'
      returning id, type, project_id, conversation_id, run_id, user_id, data, created_at, pg_notify(${eventsChannel}, ${tag}) as notified
    )${outboxAfter([...startedEvents, ...queuedEvents])}
    select (select status from r) as status, a.active, (select jsonb_agg(to_jsonb(e.*) - 'notified') from e) as events,
           (select transcript from pre) as transcript, (select has_knowledge from pre) as has_knowledge,
           (select has_memories from pre) as has_memories, (select input_size from pre) as input_size,
           (select compaction from pre) as compaction, (select kept_count from pre) as kept_count
    from a`.execute(kysely(db))
  const result = rows[0]!
  if (result.status === null) return { active: runFromJson(result.active!), events: [] }
  const events = (result.events ?? []).map(eventFromJson).sort((a, b) => a.id - b.id)
  if (result.status === 'queued') return { run: toRun(queued), events }
  if (!prefetch) return { run: toRun(running), events }
  // The statement reads what was there before it: the user message it wrote is added here.
  const message: TranscriptRow = {
    id: messageId,
    role: 'user',
    content: input.input,
    toolCalls: null,
    toolCallId: null,
    status: 'completed',
    ...(input.parts && { parts: input.parts }),
    size: Number(result.input_size),
  }
  return {
    run: toRun(running),
    events,
    prefetched: {
      transcript: [...transcriptRowsFromJson(result.transcript), message],
      hasKnowledge: result.has_knowledge === true,
      hasMemories: result.has_memories === true,
      compaction: compactionFromJson(result.compaction),
      ...(prefetch.kept && { keptCount: Number(result.kept_count) }),
    },
  }
}

function transcriptRead(conversationId: string, prefetch: RunPrefetch) {
  return prefetch.kept
    ? transcriptAfterRead(conversationId, prefetch.kept.lastId, prefetch.maxRows)
    : transcriptTailRead(conversationId, prefetch.maxChars, prefetch.maxRows)
}
