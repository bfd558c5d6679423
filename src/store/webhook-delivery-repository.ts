import { sql } from 'kysely'
import type { JsonValue } from './database.js'
import type { Page, PageRequest } from './page.js'
import { decisionFromJson, type DecisionRecord } from './decision-repository.js'
import { runFromJson, type Run } from './run-repository.js'
import type { WebhookEventType } from './webhook-outbox.js'
import { toWebhook, type WebhookRecord } from './webhook-repository.js'
import { kysely, type Executor } from './executor.js'

// --- ids ---------------------------------------------------------------------------------------

const alphabet = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'

/**
 * A message's public id: a ULID whose time is the message's creation and whose 80 "random" bits are
 * its row number (the outbox inserts rows in SQL, where an identity costs nothing and a real ULID
 * costs a function call per row). Sortable, unique, and the row is found again from it.
 */
export function deliveryId(row: bigint | string | number, createdAt: Date | string): string {
  let time = new Date(createdAt).getTime()
  let out = ''
  for (let index = 0; index < 10; index++) {
    out = alphabet[time % 32]! + out
    time = Math.floor(time / 32)
  }
  let rest = BigInt(row)
  let tail = ''
  for (let index = 0; index < 16; index++) {
    tail = alphabet[Number(rest % 32n)]! + tail
    rest /= 32n
  }
  return out + tail
}

/**
 * The row number a public delivery id names (the caller checks the id matches the row's); -1, which
 * names no row, for an id whose 80 bits are past a `bigint` (well-formed, and never issued).
 */
export function deliveryRow(id: string): bigint {
  let value = 0n
  for (const char of id.slice(10)) value = value * 32n + BigInt(alphabet.indexOf(char))
  return value > 9_223_372_036_854_775_807n ? -1n : value
}

// --- the API's view ------------------------------------------------------------------------------

export interface DeliveryAttempt {
  attempt: number
  startedAt: string
  durationMs: number
  statusCode: number | null
  error: string | null
  /** When the next attempt was scheduled after this one; null after a success or the last one. */
  nextAttemptAt: string | null
}

export interface DeliveryRecord {
  id: string
  webhookId: string
  /** The `webhook-id` header: the same on every attempt and redelivery. */
  messageId: string
  eventId: string
  eventType: WebhookEventType
  status: 'pending' | 'delivered' | 'failed'
  /** An attempt is being made right now (by some instance). */
  inFlight: boolean
  attemptCount: number
  nextAttemptAt: string | null
  createdAt: string
  deliveredAt: string | null
  /** The most recent attempts (up to 50), oldest first. */
  attempts: DeliveryAttempt[]
}

interface DeliveryRow {
  id: string
  webhook_id: string
  event_id: string
  event_type: string
  status: DeliveryRecord['status']
  attempts: number
  next_attempt_at: Date
  lease_owner: string | null
  created_at: Date
  delivered_at: Date | null
  log: Array<{
    attempt: number
    started_at: string
    duration_ms: number
    status_code: number | null
    error: string | null
    next_attempt_at: string | null
  }> | null
}

const iso = (value: Date | string | null): string | null => (value === null ? null : new Date(value).toISOString())

function toDelivery(row: DeliveryRow): DeliveryRecord {
  const id = deliveryId(row.id, row.created_at)
  return {
    id,
    webhookId: row.webhook_id,
    messageId: `msg_${id}`,
    eventId: String(row.event_id),
    eventType: row.event_type as WebhookEventType,
    status: row.status,
    inFlight:
      row.status === 'pending' && row.lease_owner !== null && new Date(row.next_attempt_at).getTime() > Date.now(),
    attemptCount: row.attempts,
    nextAttemptAt: row.status === 'pending' ? iso(row.next_attempt_at) : null,
    createdAt: iso(row.created_at)!,
    deliveredAt: iso(row.delivered_at),
    attempts: (row.log ?? []).map((entry) => ({
      attempt: entry.attempt,
      startedAt: iso(entry.started_at)!,
      durationMs: entry.duration_ms,
      statusCode: entry.status_code,
      error: entry.error,
      nextAttemptAt: iso(entry.next_attempt_at),
    })),
  }
}

const deliveryColumns = sql`m.id, m.webhook_id, m.event_id, m.event_type, m.status, m.attempts, m.next_attempt_at, m.lease_owner, m.created_at, m.delivered_at,
  (select jsonb_agg(a order by a.id) from (
     select id, attempt, started_at, duration_ms, status_code, error, next_attempt_at from webhook_attempts where message_id = m.id order by id desc limit 50
   ) a) as log`

/** A subscription's messages, newest first, each with its latest attempts. `after` is a public id. */
export async function listDeliveries(
  db: Executor,
  webhookId: string,
  page: PageRequest,
): Promise<Page<DeliveryRecord>> {
  const { rows } = await sql<DeliveryRow>`
    select ${deliveryColumns} from webhook_messages m
    where m.webhook_id = ${webhookId} ${page.after ? sql`and m.id < ${String(deliveryRow(page.after))}` : sql``}
    order by m.id desc limit ${page.limit + 1}`.execute(kysely(db))
  const items = rows.slice(0, page.limit).map(toDelivery)
  return { items, nextCursor: rows.length > page.limit ? (items.at(-1)?.id ?? null) : null }
}

export async function getDelivery(db: Executor, webhookId: string, id: string): Promise<DeliveryRecord | undefined> {
  const { rows } =
    await sql<DeliveryRow>`select ${deliveryColumns} from webhook_messages m where m.id = ${String(deliveryRow(id))} and m.webhook_id = ${webhookId}`.execute(
      kysely(db),
    )
  const found = rows[0] && toDelivery(rows[0])
  return found?.id === id ? found : undefined
}

/**
 * Queues a message again, with the body and `webhook-id` it had, and a fresh retry window. One that
 * is being attempted right now is left to that attempt.
 */
export async function redeliverMessage(
  db: Executor,
  webhookId: string,
  id: string,
): Promise<DeliveryRecord | undefined> {
  if (!(await getDelivery(db, webhookId, id))) return undefined
  await sql`
    update webhook_messages set status = 'pending', next_attempt_at = now(), window_start = now(), lease_owner = null
    where id = ${String(deliveryRow(id))} and webhook_id = ${webhookId} and not (status = 'pending' and lease_owner is not null and next_attempt_at > now())`.execute(
    kysely(db),
  )
  return getDelivery(db, webhookId, id)
}

// --- the delivery worker -------------------------------------------------------------------------

/** A message claimed for one attempt, with what sending it needs. */
export interface ClaimedMessage {
  row: string
  id: string
  webhookId: string
  projectId: string
  eventType: string
  /** This attempt's number (1 for the first). */
  attempt: number
  /** The body rendered at the first attempt; null before it. */
  payload: string | null
  windowStart: Date
  url: string
  secret: string
  /** The secret before the last rotation, while it still signs too. */
  previousSecret: string | null
  /** The W3C traceparent of the work that committed the event (tracing on), which the delivery continues. */
  traceParent: string | null
  /** While `payload` is null: the reported event, and the run or decision it is about as they are now. */
  event: {
    id: string
    type: string
    data: { [key: string]: JsonValue }
    createdAt: string
    runId: string | null
  } | null
  run: Run | null
  decision: DecisionRecord | null
}

interface ClaimRow {
  id: string
  webhook_id: string
  project_id: string
  event_type: string
  attempts: number
  payload: string | null
  created_at: Date
  window_start: Date
  url: string
  secret: string
  previous_secret: string | null
  trace_parent: string | null
  event: {
    id: number
    type: string
    data: { [key: string]: JsonValue }
    created_at: string
    run_id: string | null
  } | null
  run: { [key: string]: JsonValue } | null
  decision: { [key: string]: JsonValue } | null
}

/**
 * Claims up to `limit` due messages of enabled subscriptions for one attempt each: `next_attempt_at`
 * moves `leaseMs` ahead (so a message whose instance dies is due again then) and the owner is
 * recorded. Rows another instance is claiming are skipped. A message claimed before whose attempt was
 * never recorded (its instance died) gets that attempt logged as interrupted. A first attempt also
 * gets what its body is rendered from (the event; its run or decision), read in the same statement.
 */
export async function claimMessages(
  db: Executor,
  owner: string,
  limit: number,
  leaseMs: number,
): Promise<ClaimedMessage[]> {
  const { rows } = await sql<ClaimRow>`
    with due as (
      select m.id, m.attempts, m.lease_owner, m.claimed_at from webhook_messages m join webhooks w on w.id = m.webhook_id
      where m.status = 'pending' and m.next_attempt_at <= now() and w.enabled
      order by m.next_attempt_at limit ${limit}
      for update of m skip locked
    ),
    lost as (
      insert into webhook_attempts (message_id, attempt, started_at, duration_ms, error)
      -- It started when it was claimed (unknown for a claim made before that was recorded: now).
      select id, attempts, coalesce(claimed_at, now()), 0,
             'no outcome recorded: the instance making this attempt stopped' from due where lease_owner is not null
    ),
    c as (
      update webhook_messages m set attempts = m.attempts + 1, lease_owner = ${owner}, claimed_at = now(),
        next_attempt_at = now() + ${leaseMs} * interval '1 millisecond'
      from due where m.id = due.id
      returning m.id, m.webhook_id, m.event_id, m.event_type, m.attempts, m.payload, m.created_at, m.window_start, m.trace_parent
    )
    select c.id, c.webhook_id, w.project_id, c.event_type, c.attempts, c.payload, c.created_at, c.window_start, c.trace_parent, w.url, w.secret,
           case when w.previous_secret_until > now() then w.previous_secret end as previous_secret,
           case when ev.id is not null then jsonb_build_object('id', ev.id, 'type', ev.type, 'data', ev.data, 'created_at', ev.created_at, 'run_id', ev.run_id) end as event,
           case when ev.id is not null and c.event_type like 'run.%' then (select to_jsonb(r) from runs r where r.id = coalesce(ev.run_id, ev.data->>'runId')) end as run,
           case when ev.id is not null and c.event_type = 'decision.required' then (select to_jsonb(d) from decisions d where d.id = ev.data->>'decisionId') end as decision
    from c join webhooks w on w.id = c.webhook_id
    left join lateral (select id, type, data, created_at, run_id from events where id = c.event_id and c.payload is null) ev on true`.execute(
    kysely(db),
  )
  return rows.map((row) => ({
    row: String(row.id),
    id: deliveryId(row.id, row.created_at),
    webhookId: row.webhook_id,
    projectId: row.project_id,
    eventType: row.event_type,
    attempt: row.attempts,
    payload: row.payload,
    windowStart: new Date(row.window_start),
    url: row.url,
    secret: row.secret,
    previousSecret: row.previous_secret,
    traceParent: row.trace_parent,
    event: row.event && {
      id: String(row.event.id),
      type: row.event.type,
      data: row.event.data,
      createdAt: new Date(row.event.created_at).toISOString(),
      runId: row.event.run_id,
    },
    run: row.run && runFromJson(row.run),
    decision: row.decision && decisionFromJson(row.decision),
  }))
}

export interface AttemptOutcome {
  startedAt: Date
  durationMs: number
  statusCode: number | null
  error: string | null
  /** `delivered`, `retry` at `nextAttemptAt`, `failed` for good, or `interrupted` by a stop (due again at once, not a failure). */
  result: 'delivered' | 'retry' | 'failed' | 'interrupted'
  nextAttemptAt: Date | null
  /** The body this attempt sent (kept for every later attempt). */
  payload: string
}

/**
 * Records attempts that did not fail for good, many in one statement (the deliverer batches what
 * finished meanwhile): each attempt's log row, its message's new state, and each subscription's
 * failure record (a success clears it; a failure starts it). An attempt whose claim was lost (another
 * instance took the message over) is not recorded. Returns how many were.
 */
export async function recordAttempts(
  db: Executor,
  owner: string,
  attempts: ReadonlyArray<{ message: ClaimedMessage; outcome: AttemptOutcome }>,
): Promise<number> {
  if (attempts.length === 0) return 0
  const values = attempts.map(({ message, outcome }) => {
    if (outcome.result === 'failed')
      throw new Error('recordAttempts takes no attempt that failed for good (recordFailure does)')
    const status = outcome.result === 'delivered' ? 'delivered' : 'pending'
    return sql`(${message.row}::bigint, ${message.attempt}::int, ${status}::text, ${outcome.payload}::text, ${outcome.nextAttemptAt}::timestamptz,
      ${outcome.startedAt}::timestamptz, ${Math.round(outcome.durationMs)}::int, ${outcome.statusCode}::int, ${outcome.error}::text, ${outcome.result === 'retry'}::boolean)`
  })
  const { rows } = await sql<{ recorded: string }>`
    with o (id, attempt, status, payload, next_at, started_at, duration_ms, status_code, error, failing) as (values ${sql.join(values)}),
    m as (
      update webhook_messages wm set status = o.status, lease_owner = null, payload = coalesce(wm.payload, o.payload),
             next_attempt_at = coalesce(o.next_at, wm.next_attempt_at), delivered_at = case when o.status = 'delivered' then now() else wm.delivered_at end
      from o where wm.id = o.id and wm.lease_owner = ${owner} and wm.attempts = o.attempt
      returning wm.id, wm.webhook_id
    ),
    a as (
      insert into webhook_attempts (message_id, attempt, started_at, duration_ms, status_code, error, next_attempt_at)
      select o.id, o.attempt, o.started_at, o.duration_ms, o.status_code, o.error, o.next_at from o join m on m.id = o.id
      returning id
    ),
    s as (
      select m.webhook_id, bool_or(o.status = 'delivered') as ok, min(o.started_at) filter (where o.failing) as failed_at
      from m join o on o.id = m.id group by m.webhook_id
    ),
    h as (
      update webhooks w set failed_messages = case when s.ok then 0 else w.failed_messages end,
                            failing_since = case when s.ok then null else coalesce(w.failing_since, s.failed_at) end
      from s where w.id = s.webhook_id
        and ((s.ok and (w.failed_messages <> 0 or w.failing_since is not null)) or (not s.ok and s.failed_at is not null and w.failing_since is null))
      returning w.id
    )
    select (select count(*) from m) as recorded, (select count(*) from a) as logged, (select count(*) from h) as hooked`.execute(
    kysely(db),
  )
  return Number(rows[0]?.recorded ?? 0)
}

/** Records an attempt after which its message failed for good, counting it on the subscription. Returns whether it was recorded. */
export async function recordFailure(
  db: Executor,
  message: ClaimedMessage,
  owner: string,
  outcome: AttemptOutcome,
): Promise<boolean> {
  const { rows } = await sql<{ recorded: string }>`
    with m as (
      update webhook_messages set status = 'failed', lease_owner = null, payload = coalesce(payload, ${outcome.payload})
      where id = ${message.row} and lease_owner = ${owner} and attempts = ${message.attempt}
      returning id, webhook_id
    ),
    a as (
      insert into webhook_attempts (message_id, attempt, started_at, duration_ms, status_code, error, next_attempt_at)
      select id, ${message.attempt}, ${outcome.startedAt}::timestamptz, ${Math.round(outcome.durationMs)}, ${outcome.statusCode}::int, ${outcome.error}, null from m
      returning id
    ),
    h as (
      update webhooks set failed_messages = failed_messages + 1, failing_since = coalesce(failing_since, ${outcome.startedAt}::timestamptz)
      where id = (select webhook_id from m) returning id
    )
    select (select count(*) from m) as recorded, (select count(*) from a) as logged, (select count(*) from h) as hooked`.execute(
    kysely(db),
  )
  return Number(rows[0]?.recorded ?? 0) > 0
}

/**
 * Disables a subscription whose failures have run long enough: `failedMessages` messages in a row
 * failed for good, or failing (no success) for `failingMs`. Returns it when this call disabled it
 * (exactly one caller does, whatever runs concurrently).
 */
export async function disableIfFailing(
  db: Executor,
  webhookId: string,
  failedMessages: number,
  failingMs: number,
): Promise<WebhookRecord | undefined> {
  const { rows } = await sql<Parameters<typeof toWebhook>[0]>`
    update webhooks set enabled = false, disabled_at = now(), updated_at = now(),
           disabled_reason = case when failed_messages >= ${failedMessages} then failed_messages || ' messages in a row failed'
                                  else 'failing since ' || to_char(failing_since at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') end
    where id = ${webhookId} and enabled
      and (failed_messages >= ${failedMessages} or failing_since <= now() - ${failingMs} * interval '1 millisecond')
    returning id, project_id, url, events, description, enabled, disabled_reason, disabled_at, failed_messages, failing_since, null::timestamptz as previous_secret_until,
              created_by, created_at, updated_at`.execute(kysely(db))
  return rows[0] && toWebhook(rows[0])
}

/** Embedded database at start: every claim is a dead process's, so those messages are due now. */
export async function releaseWebhookClaims(db: Executor): Promise<void> {
  await sql`update webhook_messages set next_attempt_at = now() where status = 'pending' and lease_owner is not null and next_attempt_at > now()`.execute(
    kysely(db),
  )
}

/** The owner of a project (the `webhook.disabled` event is theirs). */
export async function projectOwnerOf(db: Executor, projectId: string): Promise<string | undefined> {
  const row = await kysely(db).selectFrom('projects').select('owner_id').where('id', '=', projectId).executeTakeFirst()
  return row?.owner_id
}
