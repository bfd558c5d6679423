/** An event to append to the log (docs/architecture.md#the-event-log). */
export interface NewEvent {
  type: string
  projectId?: string | null
  conversationId?: string | null
  runId?: string | null
  userId?: string | null
  data: { [key: string]: unknown }
  /** `false`: no webhook reports it (a waiting run's `requiredAction` changed; it did not start waiting). Not stored. */
  webhook?: false
}
