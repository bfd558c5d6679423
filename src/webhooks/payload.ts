import { toDecisionView } from '../cmdbus/index.js'
import { getDecision, getRun, runJson, type ClaimedMessage, type Executor, type JsonValue } from '../store/index.js'
import { webhookLimits } from './settings.js'

type Data = { [key: string]: JsonValue }

/**
 * A message's body, `{type, timestamp, data}`: `timestamp` is the event's; `data` is the resource as
 * the API shows it — the run (`GET /api/runs/:id`), the decision (`GET /api/decisions/:id`), or the
 * knowledge item as the event recorded it (the API's view without the caller-relative `shared`). Runs
 * and decisions are read when the first attempt is made (milliseconds after the event, as a rule) and
 * the body is kept, so every retry and redelivery sends the same bytes. A resource that is gone falls
 * back to the event's own data.
 */
export async function renderPayload(db: Executor, message: ClaimedMessage): Promise<string> {
  const event = message.event
  const timestamp = event?.createdAt ?? new Date().toISOString()
  const data = event ? await resourceOf(db, message.eventType, event) : {}
  const body = JSON.stringify({ type: message.eventType, timestamp, data })
  if (Buffer.byteLength(body) <= webhookLimits.maxBodyBytes) return body
  // Too large to send whole (a decision's params, a long error): the ids, to fetch it by.
  return JSON.stringify({ type: message.eventType, timestamp, data: { id: typeof data.id === 'string' ? data.id : null, truncated: true } })
}

async function resourceOf(db: Executor, type: string, event: NonNullable<ClaimedMessage['event']>): Promise<Data> {
  if (type.startsWith('run.')) {
    const runId = event.runId ?? (typeof event.data.runId === 'string' ? event.data.runId : null)
    const run = runId ? await getRun(db, runId) : undefined
    return run ? runJson(run) : event.data
  }
  if (type === 'decision.required') {
    const decisionId = typeof event.data.decisionId === 'string' ? event.data.decisionId : null
    const decision = decisionId ? await getDecision(db, decisionId) : undefined
    return decision ? (toDecisionView(decision) as unknown as Data) : event.data
  }
  const item = event.data.item
  return item && typeof item === 'object' && !Array.isArray(item) ? item : event.data
}
