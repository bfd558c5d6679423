import { toDecisionView } from '../cmdbus/index.js'
import { runView } from '../resources/index.js'
import type { ClaimedMessage, JsonValue } from '../store/index.js'
import { webhookLimits } from './settings.js'

type Data = { [key: string]: JsonValue }

/**
 * A message's body, `{type, timestamp, data}`: `timestamp` is the event's; `data` is the resource as
 * the API shows it — the run (`GET /api/runs/:id`), the decision (`GET /api/decisions/:id`), or the
 * knowledge item as the event recorded it (the API's view without the caller-relative `shared`). Runs
 * and decisions are as the first attempt's claim read them (milliseconds after the event, as a rule);
 * the body is kept, so every retry and redelivery sends the same bytes. A resource that is gone falls
 * back to the event's own data.
 */
export function renderPayload(message: ClaimedMessage): string {
  const event = message.event
  const timestamp = event?.createdAt ?? new Date().toISOString()
  const data = event ? resourceOf(message, event) : {}
  const body = JSON.stringify({ type: message.eventType, timestamp, data })
  if (Buffer.byteLength(body) <= webhookLimits.maxBodyBytes) return body
  // Too large to send whole (a decision's params, a long error): the id, to fetch it by.
  return JSON.stringify({
    type: message.eventType,
    timestamp,
    data: { id: typeof data.id === 'string' ? data.id : null, truncated: true },
  })
}

function resourceOf(message: ClaimedMessage, event: NonNullable<ClaimedMessage['event']>): Data {
  if (message.eventType.startsWith('run.')) return message.run ? runView(message.run) : event.data
  if (message.eventType === 'decision.required')
    return message.decision ? (toDecisionView(message.decision) as unknown as Data) : event.data
  const item = event.data.item
  return item && typeof item === 'object' && !Array.isArray(item) ? item : event.data
}
