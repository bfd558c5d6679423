/** The store: one set of queries over Postgres (pg) or embedded PGlite, migrations and the event log. */
export {
  openStore,
  dumpMigratedPGlite,
  pgliteTemplatePath,
  redactUrl,
  type Engine,
  type Store,
  type StoreOptions,
} from './open-store.js'
export { readMigrations, migrate, type Migration, type MigrationResult } from './migrator.js'
export {
  StoreError,
  RequestError,
  KeyTaken,
  notFoundError,
  isUniqueViolation,
  type StoreErrorCode,
  type RequestErrorCode,
} from './store-errors.js'
export type { Database, Executor, JsonValue, PermissionMode } from './database.js'
export { newId, isId } from './ids.js'
export type { Page, PageRequest } from './page.js'
export { appendCatalogChange } from './catalog-events.js'
export { runLogPoint } from './event-log.js'
export {
  appendEvents,
  appendEventsAfter,
  readEvents,
  readEventPage,
  eventDataJson,
  lastEventId,
  type EventRecord,
  type EventScope,
  type NewEvent,
  type RunFence,
} from './event-log.js'
export { EventFeed } from './event-feed.js'
export { AccessSignals, announceAccessChange, type AccessListener, type AccessSubject } from './access-signals.js'
export { RunSignals, announceRunEnded, type RunSignalListener } from './run-signals.js'
export { streamEvents, type EventStreamOptions } from './event-stream.js'
export * from './user-repository.js'
export { Accounts } from './accounts.js'
export * from './project-repository.js'
export * from './conversation-repository.js'
export * from './message-repository.js'
export * from './idempotency-repository.js'
export * from './kv-repository.js'
export * from './mcp-connection-repository.js'
export * from './mcp-session-repository.js'
export * from './dispatch-repository.js'
export * from './decision-repository.js'
export * from './audit-repository.js'
export { canonicalJson } from './canonical-json.js'
export type { AuditFilter, AuditEntry } from './audit-repository.js'
export * from './run-repository.js'
export {
  completeAssistantMessageWrite,
  finishDispatchInRun,
  insertAssistantMessageWrite,
  insertToolCallsWrite,
  insertToolMessageAfterFence,
  toolCallResultAfterFence,
  type FencedPart,
  type FencedWrite,
  type TransitionFence,
  type TransitionRead,
  type TransitionReads,
  type Prefetched,
  type RunPrefetch,
  type TransitionWrite,
} from './run-transition.js'
export {
  runStatuses,
  runTransitions,
  moveInto,
  isRunTransition,
  type RunActor,
  type RunTransitionRule,
  type RunFrom,
  type RunCreatedStatus,
  type RunMove,
} from './run-states.js'
export {
  insertDispatchStarted,
  toolCallStartedWithDispatch,
  type DispatchGatedWrite,
  type DispatchStartPart,
  type StartingDispatch,
} from './dispatch-start.js'
export type { RunStatus, RunPhase, ToolCallStatus, KnowledgeStatus, IngestStatus } from './database.js'
export * from './knowledge-repository.js'
export { getSetting, setSetting, SettingsSignals, settingsChannel } from './settings-repository.js'
export * from './stream-ticket-repository.js'
export * from './storable.js'
export * from './work-usage-repository.js'
export { webhookEventTypes, webhookTypeOf, WebhookSignals, type WebhookEventType } from './webhook-outbox.js'
export {
  insertWebhook,
  getWebhook,
  listWebhooks,
  updateWebhook,
  rotateWebhookSecret,
  deleteWebhook,
  type WebhookRecord,
  type NewWebhook,
  type WebhookPatch,
} from './webhook-repository.js'
export {
  claimMessages,
  recordAttempts,
  recordFailure,
  disableIfFailing,
  releaseWebhookClaims,
  listDeliveries,
  getDelivery,
  redeliverMessage,
  projectOwnerOf,
  type ClaimedMessage,
  type AttemptOutcome,
  type DeliveryRecord,
  type DeliveryAttempt,
} from './webhook-delivery-repository.js'
