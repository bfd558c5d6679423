import { sql } from 'kysely'
import { toPage, type Page, type PageRequest } from './page.js'
import type { WebhookEventType } from './webhook-outbox.js'
import { kysely, type Executor } from './executor.js'

/** A webhook subscription as the API shows it: never its secret. */
export interface WebhookRecord {
  id: string
  projectId: string
  url: string
  events: WebhookEventType[]
  description: string | null
  enabled: boolean
  disabledReason: string | null
  disabledAt: string | null
  /** Messages in a row that failed for good (reset by a success or by re-enabling). */
  failedMessages: number
  /** The first failed attempt since the last success, or null. */
  failingSince: string | null
  /** Until when the secret before the last rotation still signs too, or null. */
  previousSecretUntil: string | null
  createdBy: string
  createdAt: string
  updatedAt: string
}

export interface NewWebhook {
  id: string
  projectId: string
  url: string
  events: string[]
  description: string | null
  secret: string
  createdBy: string
}

export interface WebhookPatch {
  url?: string
  events?: string[]
  description?: string | null
  enabled?: boolean
}

interface WebhookRow {
  id: string
  project_id: string
  url: string
  events: string[]
  description: string | null
  enabled: boolean
  disabled_reason: string | null
  disabled_at: Date | null
  failed_messages: number
  failing_since: Date | null
  previous_secret_until: Date | null
  created_by: string
  created_at: Date
  updated_at: Date
}

const columns = sql`id, project_id, url, events, description, enabled, disabled_reason, disabled_at, failed_messages, failing_since,
  case when previous_secret_until > now() then previous_secret_until end as previous_secret_until, created_by, created_at, updated_at`

function iso(value: Date | null): string | null {
  return value === null ? null : new Date(value).toISOString()
}

export function toWebhook(row: WebhookRow): WebhookRecord {
  return {
    id: row.id,
    projectId: row.project_id,
    url: row.url,
    events: [...row.events] as WebhookEventType[],
    description: row.description,
    enabled: row.enabled,
    disabledReason: row.disabled_reason,
    disabledAt: iso(row.disabled_at),
    failedMessages: row.failed_messages,
    failingSince: iso(row.failing_since),
    previousSecretUntil: iso(row.previous_secret_until),
    createdBy: row.created_by,
    createdAt: iso(row.created_at)!,
    updatedAt: iso(row.updated_at)!,
  }
}

/** Inserts a subscription when the project has fewer than `max`; undefined otherwise. */
export async function insertWebhook(
  db: Executor,
  webhook: NewWebhook,
  max: number,
): Promise<WebhookRecord | undefined> {
  // The project's row lock serialises creations, so the count holds.
  const { rows } = await sql<WebhookRow>`
    with p as (select id from projects where id = ${webhook.projectId} for no key update)
    insert into webhooks (id, project_id, url, events, description, secret, created_by)
    select ${webhook.id}, p.id, ${webhook.url}, ${sql.val(webhook.events)}::text[], ${webhook.description}, ${webhook.secret}, ${webhook.createdBy}
    from p where (select count(*) from webhooks where project_id = p.id) < ${max}
    returning ${columns}`.execute(kysely(db))
  return rows[0] && toWebhook(rows[0])
}

export async function getWebhook(db: Executor, projectId: string, id: string): Promise<WebhookRecord | undefined> {
  const { rows } =
    await sql<WebhookRow>`select ${columns} from webhooks where id = ${id} and project_id = ${projectId}`.execute(
      kysely(db),
    )
  return rows[0] && toWebhook(rows[0])
}

/** A subscription with its current signing secret (an idempotent creation's replay). */
export async function getWebhookWithSecret(
  db: Executor,
  projectId: string,
  id: string,
): Promise<(WebhookRecord & { secret: string }) | undefined> {
  const { rows } = await sql<WebhookRow & { secret: string }>`
    select ${columns}, secret from webhooks where id = ${id} and project_id = ${projectId}`.execute(kysely(db))
  return rows[0] && { ...toWebhook(rows[0]), secret: rows[0].secret }
}

/** A project's subscriptions, newest first. */
export async function listWebhooks(db: Executor, projectId: string, page: PageRequest): Promise<Page<WebhookRecord>> {
  const { rows } = await sql<WebhookRow>`
    select ${columns} from webhooks where project_id = ${projectId} ${page.after ? sql`and id < ${page.after}` : sql``}
    order by id desc limit ${page.limit + 1}`.execute(kysely(db))
  return toPage(rows.map(toWebhook), page.limit)
}

/** Applies a patch; enabling a disabled subscription clears its failure record. */
export async function updateWebhook(
  db: Executor,
  projectId: string,
  id: string,
  patch: WebhookPatch,
): Promise<WebhookRecord | undefined> {
  const sets = [sql`updated_at = now()`]
  if (patch.url !== undefined) sets.push(sql`url = ${patch.url}`)
  if (patch.events !== undefined) sets.push(sql`events = ${sql.val(patch.events)}::text[]`)
  if (patch.description !== undefined) sets.push(sql`description = ${patch.description}`)
  if (patch.enabled === false)
    sets.push(
      sql`enabled = false`,
      sql`disabled_reason = coalesce(disabled_reason, 'disabled by a person')`,
      sql`disabled_at = coalesce(disabled_at, now())`,
    )
  if (patch.enabled === true) {
    sets.push(
      sql`enabled = true`,
      sql`disabled_reason = null`,
      sql`disabled_at = null`,
      sql`failed_messages = 0`,
      sql`failing_since = null`,
    )
  }
  const { rows } =
    await sql<WebhookRow>`update webhooks set ${sql.join(sets)} where id = ${id} and project_id = ${projectId} returning ${columns}`.execute(
      kysely(db),
    )
  return rows[0] && toWebhook(rows[0])
}

/** A new secret; the current one keeps signing (a second signature) until `previousUntil`. */
export async function rotateWebhookSecret(
  db: Executor,
  projectId: string,
  id: string,
  secret: string,
  previousUntil: Date,
): Promise<WebhookRecord | undefined> {
  const { rows } = await sql<WebhookRow>`
    update webhooks set previous_secret = secret, previous_secret_until = ${previousUntil}::timestamptz, secret = ${secret}, updated_at = now()
    where id = ${id} and project_id = ${projectId} returning ${columns}`.execute(kysely(db))
  return rows[0] && toWebhook(rows[0])
}

/** Deletes a subscription with its messages and their attempts. */
export async function deleteWebhook(db: Executor, projectId: string, id: string): Promise<boolean> {
  const result = await sql`delete from webhooks where id = ${id} and project_id = ${projectId}`.execute(kysely(db))
  return Number(result.numAffectedRows ?? 0) > 0
}
