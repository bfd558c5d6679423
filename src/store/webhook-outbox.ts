import { sql, type RawBuilder } from 'kysely'
import { activeTraceParent } from '../telemetry/index.js'
import type { NewEvent } from './new-event.js'

/** The channel that tells every instance's deliverer that messages were committed (docs/webhooks.md). */
export const webhooksChannel = 'plinth_webhooks'

/** In-process fan-out of that notification (from this and every other instance). */
export class WebhookSignals {
  readonly #listeners = new Set<() => void>()

  subscribe(listener: () => void): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  deliver(): void {
    for (const listener of this.#listeners) listener()
  }
}

/** The events a webhook may subscribe to (docs/webhooks.md, "Events"). */
export const webhookEventTypes = [
  'run.completed',
  'run.failed',
  'run.cancelled',
  'run.requires_action',
  'decision.required',
  'knowledge.ingested',
  'knowledge.failed',
] as const

export type WebhookEventType = (typeof webhookEventTypes)[number]

/** Event types that are webhook types as they are (a run entering `requires_action` is a `run.status`). */
const asTheyAre: readonly string[] = webhookEventTypes.filter((type) => type !== 'run.requires_action')

/** The webhook type an event is reported as, or null when no webhook reports it. */
export function webhookTypeOf(event: Pick<NewEvent, 'type' | 'data' | 'webhook'>): WebhookEventType | null {
  if (event.webhook === false) return null
  if (event.type === 'run.status') return event.data.status === 'requires_action' ? 'run.requires_action' : null
  return asTheyAre.includes(event.type) ? (event.type as WebhookEventType) : null
}

/**
 * The outbox's part of a statement that inserts events (the CTE `e`, their RETURNING rows): a message
 * for every enabled subscription of each event's project that lists its type, written in the SAME
 * statement, so an event and the messages reporting it commit (or vanish) together, and the commit
 * wakes the deliverers (NOTIFY, only when a message was written). `null` when no
 * event of the batch is reported: the event log's hot path (deltas, tool calls) pays nothing. The SQL
 * maps the rows as `webhookTypeOf` maps the batch, for the types the batch reports.
 */
export function outboxCte(events: readonly Pick<NewEvent, 'type' | 'data' | 'webhook'>[]): RawBuilder<unknown> | null {
  const reported = new Set(events.map(webhookTypeOf).filter((type) => type !== null))
  if (reported.size === 0) return null
  const same = [...reported].filter((type) => type !== 'run.requires_action')
  const requiresAction = reported.has('run.requires_action')
    ? sql`when e.type = 'run.status' and e.data->>'status' = 'requires_action' then 'run.requires_action'`
    : sql``
  const sameTypes =
    same.length > 0 ? sql`when e.type in (${sql.join(same.map((type) => sql.lit(type)))}) then e.type` : sql``
  // The trace that committed the events (when tracing is on): their deliveries continue it.
  const traceParent = activeTraceParent() ?? null
  return sql`wo as (
    insert into webhook_messages (webhook_id, event_id, event_type, trace_parent)
    select w.id, e.id, t.type, ${traceParent}::text
    from e
    cross join lateral (select case ${requiresAction} ${sameTypes} end as type) t
    join webhooks w on w.project_id = e.project_id and w.enabled and t.type = any (w.events)
    returning id, pg_notify(${webhooksChannel}, '') as notified)`
}

/** `, wo as (…)` after the CTE `e`, or nothing. */
export function outboxAfter(events: readonly Pick<NewEvent, 'type' | 'data' | 'webhook'>[]): RawBuilder<unknown> {
  const cte = outboxCte(events)
  return cte ? sql`, ${cte}` : sql``
}
