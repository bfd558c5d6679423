/** The store: one set of queries over Postgres (pg) or embedded PGlite, migrations and the event log. */
export { openStore, dumpMigratedPGlite, pgliteTemplatePath, type Store } from './open-store.js'
export { readMigrations, migrate } from './migrator.js'
export {
  StoreError,
  RequestError,
  KeyTaken,
  LeaseLost,
  notFoundError,
  isUniqueViolation,
  isDatabaseUnavailable,
  isRunQuotaFull,
} from './store-errors.js'
export type { JsonValue } from './database.js'
export type { Executor } from './executor.js'
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
  highestEventId,
  type EventRecord,
  type EventScope,
  type NewEvent,
  type RunFence,
} from './event-log.js'
export { GroupedAppends, appendGrouped, type AppendItem } from './grouped-appends.js'
export { AccessSignals, announceAccessChange, type AccessSubject } from './access-signals.js'
export { announceRunEnded } from './run-signals.js'
export { announceDecidedCallStarted, lockRunOf, runEndedSignal } from './decided-calls.js'
export { streamEvents } from './event-stream.js'
export {
  createUser,
  getUser,
  hasUsers,
  activeUserIds,
  countActiveUsers,
  createToken,
  revokeToken,
  isTokenLive,
  type User,
  type ApiToken,
  type IssuedToken,
} from './user-repository.js'
export { Accounts } from './accounts.js'
export {
  createProject,
  getProject,
  liveProjectIdsOwnedBy,
  projectIdsOwnedBy,
  listProjects,
  updateProject,
  deleteProject,
  type ModelParams,
  type AgentProfile,
  type Project,
  type ProjectInput,
} from './project-repository.js'
export {
  createConversation,
  getConversationWithProject,
  conversationProjectId,
  conversationWithProjectRead,
  conversationWithProject,
  getConversation,
  listConversations,
  listConversationsOf,
  updateConversation,
  deleteConversation,
  type Conversation,
} from './conversation-repository.js'
export { listMessages, runMessages, type Message } from './message-repository.js'
export { findIdempotencyRecord, saveIdempotencyRecord } from './idempotency-repository.js'
export { kvGet, kvSet, kvDelete, kvList, kvUpdate } from './kv-repository.js'
export {
  getMcpConnection,
  findMcpConnectionByState,
  anyConnectedMcpConnection,
  listMcpConnections,
  saveMcpConnection,
  deleteMcpConnection,
  updateMcpConnection,
  type McpConnectionRecord,
} from './mcp-connection-repository.js'
export {
  createMcpSession,
  touchMcpSession,
  deleteMcpSession,
  deleteIdleMcpSessions,
  createMcpElicitation,
  answerMcpElicitation,
  mcpElicitationState,
  type McpSessionRecord,
} from './mcp-session-repository.js'
export {
  insertDispatchAudited,
  getDispatch,
  findDispatchByKey,
  updateDispatchQuery,
  updateDispatchAudited,
  replaceDispatchParams,
  renewDispatchExecutor,
  findOrphanedDispatches,
  findApprovedUnstarted,
  dispatchExecution,
  lockDispatch,
  type DispatchStatus,
  type DispatchRecord,
  type DispatchChange,
} from './dispatch-repository.js'
export {
  insertDecision,
  getDecision,
  resolveDecision,
  pendingDecisionIds,
  overdueDecisionIds,
  listDecisions,
  insertAllowance,
  findAllowance,
  hasRejectedCall,
  pendingConnectDecisions,
  pendingDecisionKinds,
  reservePendingDecisions,
  type DecisionStatus,
  type DecisionRecord,
  type DecisionReply,
} from './decision-repository.js'
export {
  hashAuditEntry,
  lockAuditLog,
  auditAppendManyCtes,
  appendAuditEntry,
  readAuditTail,
  readAuditEntries,
  listAuditDispatches,
  lastAuditEnvelope,
  genesisHash,
  type AuditEntryInput,
  type AuditFilter,
  latestAuditHashOf,
} from './audit-repository.js'
export { canonicalJson } from './canonical-json.js'
export {
  getRun,
  laterRunExists,
  lockRun,
  updateRun,
  nextQueuedRun,
  nextQueuedRunAfterEnd,
  findRunsWithExpiredLease,
  findRunsWaitingSince,
  modelsNamedButMissing,
  findStartableQueues,
  fenceRun,
  renewLease,
  releaseLease,
  takeOverRun,
  findAnsweredWaitingRuns,
  activeRunIds,
  listRuns,
  runEvent,
  activeRunStatuses,
  terminalRunStatuses,
  type Run,
  type RunProfile,
  type OutputSpec,
  type OutputRepair,
  type NewRun,
  type RunPatch,
  type RunUsage,
  type RunBudget,
  type ModelCallUsage,
  noUsage,
  withModelCall,
} from './run-repository.js'
export {
  completeAssistantMessage,
  closeStreamingMessages,
  insertToolMessageQuery,
  readTranscript,
  readTranscriptTail,
  readTranscriptAfter,
  latestKept,
  transcriptAfterRead,
  transcriptRowsFromJson,
  type StoredToolCall,
  type TranscriptMessage,
  type MessagePart,
  type TranscriptRow,
} from './transcript-repository.js'
export { updateToolCall, updateToolCallQuery, listToolCalls, type ToolCallRecord } from './tool-call-repository.js'
export {
  completeAssistantMessageWrite,
  finishDispatch,
  insertAssistantMessageWrite,
  insertToolCallsWrite,
  insertModelCall,
  insertModelCallWrite,
  insertToolMessageAfterFence,
  toolCallResultAfterFence,
  type CarriedResult,
  type CarriedTransition,
  type FencedPart,
  type FencedWrite,
  type TransitionRead,
  type TransitionReads,
  type TransitionWrite,
} from './run-transition.js'
export {
  moveInto,
  isRunTransition,
  runTransitions,
  RunMoveRefused,
  type RunMove,
  type RunTransitionRule,
} from './run-states.js'
export { insertDispatchStarted, toolCallStartedWithDispatch, type DispatchStartPart } from './dispatch-start.js'
export { writeDispatchSteps, type DispatchStep } from './grouped-dispatch-steps.js'
export { GroupCommit } from './group-commit.js'
export type { RunStatus, ToolCallStatus } from './database.js'
export {
  insertKnowledgeItem,
  getKnowledgeItem,
  listKnowledgeItems,
  claimKnowledgeIngest,
  pendingUploadPaths,
  pendingKnowledgeItemIds,
  finishKnowledgeIngest,
  insertKnowledgeChunkBatch,
  releaseKnowledgeIngest,
  renewKnowledgeLease,
  deleteKnowledgeChunkBatch,
  completeKnowledgeIngest,
  knowledgeBytesOf,
  lockKnowledgeVolume,
  failKnowledgeIngest,
  publishKnowledgeItem,
  deleteKnowledgeItem,
  listKnowledgeChunks,
  searchChunksFullText,
  searchChunksVector,
  getRagSettings,
  setRagSettings,
  setRagTokenizer,
  updateIndexing,
  ensureVectorIndex,
  dropVectorIndexes,
  vectorIndexFit,
  countKnowledgeChunks,
  countEmbeddingsNotOf,
  analyzeChunksIfGrown,
  chunksAfter,
  updateChunkEmbeddings,
  hasKnowledge,
  knowledgeItemText,
  type KnowledgeItem,
  type NewChunk,
  type KnowledgeChunk,
  type ChunkScope,
  type ChunkHit,
} from './knowledge-repository.js'
export { latestCompaction, listCompactions, insertCompaction, type Compaction } from './compaction-repository.js'
export {
  upsertMemory,
  upsertMemoryWithinLimit,
  memoriesAfter,
  countAllMemories,
  updateMemoryEmbeddings,
  updateMemory,
  getMemory,
  findMemoryByKey,
  deleteMemory,
  countMemories,
  listMemories,
  searchMemoriesFullText,
  searchMemoriesVector,
  hasMemories,
  type Memory,
  type MemoryWrite,
  type MemoryScope,
} from './memory-repository.js'
export { getSetting, setSetting } from './settings-repository.js'
export { storableText, storableJsonText } from './storable.js'
export {
  recordWorkUsage,
  adjustWorkUsage,
  lockWorkUsage,
  workUsageOf,
  projectWorkBytes,
  type WorkUsage,
} from './work-usage-repository.js'
export {
  workFilesVersion,
  purgedConversationIds,
  workFileManifest,
  touchWorkBlob,
  storeWorkBlob,
  readWorkBlob,
  commitWorkFiles,
  discardWorkFiles,
  dropDeletedWork,
  deleteUnnamedWorkBlobs,
  type StoredWorkFile,
  type WorkFileChange,
} from './work-file-repository.js'
export { webhookEventTypes, type WebhookEventType } from './webhook-outbox.js'
export {
  insertWebhook,
  getWebhook,
  getWebhookWithSecret,
  listWebhooks,
  updateWebhook,
  rotateWebhookSecret,
  deleteWebhook,
  type WebhookRecord,
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
} from './webhook-delivery-repository.js'
// The run's transitions, one file each (docs/architecture.md#run-states).
export { type CreatedRun, type CreateRunOptions, type Prefetched, type RunPrefetch } from './transitions/create-run.js'
export { startQueuedRun } from './transitions/start-queued.js'
export {
  lockQuotaPromotion,
  quotaCandidates,
  quotaCountsFor,
  quotaQueuePosition,
  startQuotaQueuedRun,
  type QuotaCandidate,
} from './transitions/promote-quota-queued.js'
export { continueAnsweredRun, openToolCallStatuses } from './transitions/continue-answered.js'
export { waitForPerson, waitForLess } from './transitions/wait-for-person.js'
export { resumeFailedRun } from './transitions/resume-failed.js'
export { takeOver } from './transitions/take-over.js'
export { releaseForShutdown } from './transitions/release-for-shutdown.js'
export {
  usageReport,
  usageGroupings,
  type UsageFilter,
  type UsageGrouping,
  type UsageReport,
  type UsageTotals,
} from './model-call-repository.js'
export { endRun, endPatch, runEndedEvents, type RunEnding } from './transitions/end-run.js'
export {
  periodStanding,
  periodStandingRead,
  budgetPeriods,
  type BudgetPeriod,
  type PeriodBudget,
  type PeriodLimits,
  type PeriodSpending,
  type PeriodStanding,
  type ProjectBudget,
  type Spent,
} from './budget-repository.js'
export {
  runCounts,
  runCountsRead,
  projectQuotaRead,
  projectQuota,
  readTogether,
  setProjectQuota,
  type ProjectIdSql,
  type ProjectQuota,
  type RunCounts,
  type RunQuotaLimits,
} from './run-quota-repository.js'
export {
  lockedScheduleCount,
  createSchedule,
  deleteSchedule,
  getFiring,
  getSchedule,
  listFirings,
  listSchedules,
  lockDueSchedules,
  lockStalePendingFirings,
  markFiringDispatched,
  markFiringFailed,
  markFiringStarted,
  recordOccurrence,
  setFiringConversation,
  stopSchedule,
  updateSchedule,
  type FiringStatus,
  type Schedule,
  type ScheduleFiring,
  type ScheduleInput,
  type ScheduleRunTarget,
  type ScheduleCommandTarget,
  type ScheduleTarget,
} from './schedule-repository.js'
export {
  anyProjectRetention,
  deleteOldDispatches,
  deleteOldRunEvents,
  deleteStaleKnowledge,
  lockRetentionSweep,
  projectRetention,
  purgeIdleConversations,
  retentionKinds,
  type RetentionDays,
  type RetentionKind,
} from './retention-repository.js'
export {
  auditCheckpointSigned,
  pruneAuditLog,
  readAuditCheckpoint,
  signAuditCheckpoint,
  type AuditCheckpoint,
} from './audit-checkpoints.js'
