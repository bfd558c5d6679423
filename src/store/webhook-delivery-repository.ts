import { sql } from 'kysely'
import type { Executor, JsonValue } from './database.js'
import type { Page, PageRequest } from './page.js'
import { toWebhook, type WebhookRecord } from './webhook-repository.js'

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

/** The row number a public delivery id names (the caller checks the id matches the row's). */
export function deliveryRow(id: string): bigint {
  let value = 0n
  for (const char of id.slice(10)) value = value * 32n + BigInt(alphabet.indexOf(char))
  return value
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
  eventType: string
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
  log: Array<{ attempt: number; started_at: string; duration_ms: number; status_code: number | null; error: string | null; next_attempt_at: string | null }> | null
}

const iso = (value: Date | string | null): string | null => (value === null ? null : new Date(value).toISOString())

function toDelivery(row: DeliveryRow): DeliveryRecord {
  const id = deliveryId(row.id, row.created_at)
  return {
    id,
    webhookId: row.webhook_id,
    messageId: `msg_${id}`,
    eventId: String(row.event_id),
    eventType: row.event_type,
    status: row.status,
    inFlight: row.status === 'pending' && row.lease_owner !== null && new Date(row.next_attempt_at).getTime() > Date.now(),
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
export async function listDeliveries(db: Executor, webhookId: string, page: PageRequest): Promise<Page<DeliveryRecord>> {
  const { rows } = await sql<DeliveryRow>`
    select ${deliveryColumns} from webhook_messages m
    where m.webhook_id = ${webhookId} ${page.after ? sql`and m.id < ${String(deliveryRow(page.after))}` : sql``}
    order by m.id desc limit ${page.limit + 1}`.execute(db)
  const items = rows.slice(0, page.limit).map(toDelivery)
  return { items, nextCursor: rows.length > page.limit ? (items.at(-1)?.id ?? null) : null }
}

export async function getDelivery(db: Executor, webhookId: string, id: string): Promise<DeliveryRecord | undefined> {
  const { rows } = await sql<DeliveryRow>`select ${deliveryColumns} from webhook_messages m where m.id = ${String(deliveryRow(id))} and m.webhook_id = ${webhookId}`.execute(db)
  const found = rows[0] && toDelivery(rows[0])
  return found?.id === id ? found : undefined
}

/**
 * Queues a message again, with the body and `webhook-id` it had, and a fresh retry window. One that
 * is being attempted right now is left to that attempt.
 */
export async function redeliverMessage(db: Executor, webhookId: string, id: string): Promise<DeliveryRecord | undefined> {
  if (!(await getDelivery(db, webhookId, id))) return undefined
  await sql`
    update webhook_messages set status = 'pending', next_attempt_at = now(), window_start = now(), lease_owner = null
    where id = ${String(deliveryRow(id))} and webhook_id = ${webhookId} and not (status = 'pending' and lease_owner is not null and next_attempt_at > now())`.execute(db)
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
  /** The reported event, for rendering the body (only while `payload` is null). */
  event: { id: string; type: string; data: { [key: string]: JsonValue }; createdAt: string; runId: string | null } | null
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
  event: { id: number; type: string; data: { [key: string]: JsonValue }; created_at: string; run_id: string | null } | null
}

/**
 * Claims up to `limit` due messages of enabled subscriptions for one attempt each: `next_attempt_at`
 * moves `leaseMs` ahead (so a message whose instance dies is due again then) and the owner is
 * recorded. Rows another instance is claiming are skipped. A message claimed before whose attempt was
 * never recorded (its instance died) gets that attempt logged as interrupted.
 */
export async function claimMessages(db: Executor, owner: string, limit: number, leaseMs: number): Promise<ClaimedMessage[]> {
  const { rows } = await sql<ClaimRow>`
    with due as (
      select m.id, m.attempts, m.lease_owner from webhook_messages m join webhooks w on w.id = m.webhook_id
      where m.status = 'pending' and m.next_attempt_at <= now() and w.enabled
      order by m.next_attempt_at limit ${limit}
      for update of m skip locked
    ),
    lost as (
      insert into webhook_attempts (message_id, attempt, started_at, duration_ms, error)
      select id, attempts, now(), 0, 'no outcome recorded: the instance making this attempt stopped' from due where lease_owner is not null
    ),
    c as (
      update webhook_messages m set attempts = m.attempts + 1, lease_owner = ${owner}, next_attempt_at = now() + ${leaseMs} * interval '1 millisecond'
      from due where m.id = due.id
      returning m.id, m.webhook_id, m.event_id, m.event_type, m.attempts, m.payload, m.created_at, m.window_start
    )
    select c.id, c.webhook_id, w.project_id, c.event_type, c.attempts, c.payload, c.created_at, c.window_start, w.url, w.secret,
           case when w.previous_secret_until > now() then w.previous_secret end as previous_secret,
           case when c.payload is null then (select to_jsonb(ev) from (select id, type, data, created_at, run_id from events where id = c.event_id) ev) end as event
    from c join webhooks w on w.id = c.webhook_id`.execute(db)
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
    event: row.event && { id: String(row.event.id), type: row.event.type, data: row.event.data, createdAt: new Date(row.event.created_at).toISOString(), runId: row.event.run_id },
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
 * Records an attempt and its consequence in one statement: the attempt's log row, the message's new
 * state, and the subscription's failure record (a success clears it; a failure starts it). Nothing
 * happens when the claim was lost (another instance took the message over). Returns whether it was
 * recorded.
 */
export async function recordAttempt(db: Executor, message: ClaimedMessage, owner: string, outcome: AttemptOutcome): Promise<boolean> {
  const status = outcome.result === 'retry' || outcome.result === 'interrupted' ? 'pending' : outcome.result
  const hook =
    outcome.result === 'interrupted'
      ? sql`select null::text as id where false`
      : outcome.result === 'delivered'
      ? sql`update webhooks set failed_messages = 0, failing_since = null
            where id = (select webhook_id from m) and (failed_messages <> 0 or failing_since is not null) returning id`
      : outcome.result === 'retry'
        ? sql`update webhooks set failing_since = ${outcome.startedAt}::timestamptz where id = (select webhook_id from m) and failing_since is null returning id`
        : sql`update webhooks set failed_messages = failed_messages + 1, failing_since = coalesce(failing_since, ${outcome.startedAt}::timestamptz)
              where id = (select webhook_id from m) returning id`
  const { rows } = await sql<{ recorded: string }>`
    with m as (
      update webhook_messages set status = ${status}, lease_owner = null, payload = coalesce(payload, ${outcome.payload}),
             next_attempt_at = coalesce(${outcome.nextAttemptAt}::timestamptz, next_attempt_at),
             delivered_at = case when ${status} = 'delivered' then now() else delivered_at end
      where id = ${message.row} and lease_owner = ${owner} and attempts = ${message.attempt}
      returning id, webhook_id
    ),
    a as (
      insert into webhook_attempts (message_id, attempt, started_at, duration_ms, status_code, error, next_attempt_at)
      select id, ${message.attempt}, ${outcome.startedAt}::timestamptz, ${Math.round(outcome.durationMs)}, ${outcome.statusCode}::int, ${outcome.error}, ${outcome.nextAttemptAt}::timestamptz from m
      returning id
    ),
    h as (${hook})
    select (select count(*) from m) as recorded, (select count(*) from a) as logged, (select count(*) from h) as hooked`.execute(db)
  return Number(rows[0]?.recorded ?? 0) > 0
}

/**
 * Disables a subscription whose failures have run long enough: `failedMessages` messages in a row
 * failed for good, or failing (no success) for `failingMs`. Returns it when this call disabled it
 * (exactly one caller does, whatever runs concurrently).
 */
export async function disableIfFailing(db: Executor, webhookId: string, failedMessages: number, failingMs: number): Promise<WebhookRecord | undefined> {
  const { rows } = await sql<Parameters<typeof toWebhook>[0]>`
    update webhooks set enabled = false, disabled_at = now(), updated_at = now(),
           disabled_reason = case when failed_messages >= ${failedMessages} then failed_messages || ' messages in a row failed'
                                  else 'failing since ' || to_char(failing_since at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') end
    where id = ${webhookId} and enabled
      and (failed_messages >= ${failedMessages} or failing_since <= now() - ${failingMs} * interval '1 millisecond')
    returning id, project_id, url, events, description, enabled, disabled_reason, disabled_at, failed_messages, failing_since, null::timestamptz as previous_secret_until,
              created_by, created_at, updated_at`.execute(db)
  return rows[0] && toWebhook(rows[0])
}

/** Embedded database at start: every claim is a dead process's, so those messages are due now. */
export async function releaseWebhookClaims(db: Executor): Promise<void> {
  await sql`update webhook_messages set next_attempt_at = now() where status = 'pending' and lease_owner is not null and next_attempt_at > now()`.execute(db)
}

/** The owner of a project (the `webhook.disabled` event is theirs). */
export async function projectOwnerOf(db: Executor, projectId: string): Promise<string | undefined> {
  const row = await db.selectFrom('projects').select('owner_id').where('id', '=', projectId).executeTakeFirst()
  return row?.owner_id
}
