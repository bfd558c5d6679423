/** The environment variables `loadConfig` reads (docs/reference/configuration.md), and how their text is read. */

/** How an environment variable's text is read. */
export type EnvKind = 'string' | 'int' | 'number' | 'bool' | 'list' | 'duration' | 'json'

/**
 * Environment variables and the config key each one sets. A time is a duration (`30s`, `15m`; a bare
 * number is seconds) named without a unit suffix.
 */
export const envKeys: Array<[string, string, EnvKind]> = [
  ['PORT', 'port', 'int'],
  ['HOST', 'host', 'string'],
  ['DATABASE_URL', 'databaseUrl', 'string'],
  ['PLINTH_DATA_DIR', 'dataDir', 'string'],
  ['PLINTH_ADMIN_TOKEN', 'adminToken', 'string'],
  ['PLINTH_PLUGINS', 'plugins', 'list'],
  ['PLINTH_MCP_SERVERS', 'mcpServers', 'json'],
  ['PLINTH_MCP_AUTHORIZATION_SERVERS', 'mcpAuthorizationServers', 'list'],
  ['PLINTH_SECRET_KEY', 'secretKey', 'string'],
  ['PLINTH_EXEC_BACKEND', 'exec.backend', 'string'],
  ['PLINTH_DISABLE_EXEC_TOOLS', 'exec.disableExecTools', 'bool'],
  ['PLINTH_SANDBOX_USER', 'exec.sandboxUser', 'string'],
  ['PLINTH_WORK_ROOT', 'exec.workRoot', 'string'],
  ['PLINTH_EXEC_TIMEOUT', 'exec.timeoutMs', 'duration'],
  ['PLINTH_EXEC_OUTPUT_BYTES', 'exec.limits.outputBytes', 'int'],
  ['PLINTH_LOG_LEVEL', 'logLevel', 'string'],
  ['PLINTH_BODY_LIMIT', 'bodyLimit', 'int'],
  ['PLINTH_RATE_LIMIT_MAX', 'rateLimit.max', 'int'],
  ['PLINTH_RATE_LIMIT_WINDOW', 'rateLimit.windowMs', 'duration'],
  ['PLINTH_RATE_LIMIT_ADDRESS_MAX', 'rateLimit.addressMax', 'int'],
  ['PLINTH_AUTH_FAILURE_LIMIT', 'rateLimit.authFailureMax', 'int'],
  ['PLINTH_AUTH_FAILURE_WINDOW', 'rateLimit.authFailureWindowMs', 'duration'],
  ['PLINTH_REQUEST_TIMEOUT', 'requestTimeoutMs', 'duration'],
  ['PLINTH_CONNECTION_TIMEOUT', 'connectionTimeoutMs', 'duration'],
  ['PLINTH_MAX_CONNECTIONS_PER_ADDRESS', 'maxConnectionsPerAddress', 'int'],
  ['PLINTH_MAX_CONNECTIONS', 'maxConnections', 'int'],
  ['PLINTH_TRUST_PROXY', 'trustProxy', 'string'],
  ['PLINTH_METRICS_TOKEN', 'metricsToken', 'string'],
  ['PLINTH_CORS_ORIGINS', 'corsOrigins', 'list'],
  ['PLINTH_STRICT_PLUGINS', 'strictPlugins', 'bool'],
  ['PLINTH_SSE_HEARTBEAT', 'sseHeartbeatMs', 'duration'],
  ['PLINTH_SSE_MAX_PER_TOKEN', 'streams.maxPerToken', 'int'],
  ['PLINTH_SSE_MAX_STREAMS', 'streams.maxTotal', 'int'],
  ['PLINTH_SSE_MAX_LIFETIME', 'streams.maxLifetimeMs', 'duration'],
  ['PLINTH_SSE_RECHECK_INTERVAL', 'streams.recheckIntervalMs', 'duration'],
  ['PLINTH_SSE_DRAIN_TIMEOUT', 'streams.drainTimeoutMs', 'duration'],
  ['PLINTH_KNOWLEDGE_MAX_FILE_BYTES', 'knowledge.maxFileBytes', 'int'],
  ['PLINTH_KNOWLEDGE_MAX_BYTES_PER_USER', 'knowledge.maxBytesPerUser', 'int'],
  ['PLINTH_WORK_QUOTA_CONVERSATION', 'exec.quota.conversationBytes', 'int'],
  ['PLINTH_DIRECT_APPROVERS', 'exec.directApprovers', 'list'],
  ['PLINTH_WORK_QUOTA_USER', 'exec.quota.userBytes', 'int'],
  ['PLINTH_WORK_QUOTA_PROJECT', 'exec.quota.projectBytes', 'int'],
  ['PLINTH_FILE_STORE', 'exec.fileStore', 'string'],
  ['PLINTH_EXEC_MAX_CONCURRENT', 'exec.maxConcurrent', 'int'],
  ['PLINTH_EXEC_MAX_CONCURRENT_PER_USER', 'exec.maxConcurrentPerUser', 'int'],
  ['PLINTH_UPLOADS_PER_USER', 'uploads.perUser', 'int'],
  ['PLINTH_OVERLOAD_LOOP_DELAY_MS', 'overload.maxEventLoopDelayMs', 'int'],
  ['PLINTH_OVERLOAD_DB_WAIT_MS', 'overload.maxDatabaseWaitMs', 'int'],
  ['PLINTH_OVERLOAD_ADMIT_MS', 'overload.maxAdmitMs', 'int'],
  ['PLINTH_OVERLOAD_MAX_ACTIVE_RUNS', 'overload.maxActiveRuns', 'int'],
  ['PLINTH_OVERLOAD_ADAPTIVE_CAP_SECONDS', 'overload.adaptiveCapSeconds', 'int'],
  ['PLINTH_OVERLOAD_RETRY_AFTER', 'overload.retryAfterSeconds', 'int'],
  ['PLINTH_UPLOADS_TOTAL', 'uploads.total', 'int'],
  ['PLINTH_EXTRACT_TIMEOUT', 'knowledge.extract.timeoutMs', 'duration'],
  ['PLINTH_EXTRACT_MEMORY_MB', 'knowledge.extract.rssMb', 'int'],
  ['PLINTH_KNOWLEDGE_MIN_SIMILARITY', 'knowledge.minSimilarity', 'number'],
  ['PLINTH_CURRENCY', 'currency', 'string'],
  ['PLINTH_RUN_MAX_MODEL_CALLS', 'runBudget.maxModelCalls', 'int'],
  ['PLINTH_RUN_MAX_TOKENS', 'runBudget.maxTokens', 'int'],
  ['PLINTH_RUN_MAX_COST', 'runBudget.maxCost', 'number'],
  ['PLINTH_FULL_MODE_TTL', 'fullModeTtlMs', 'duration'],
  ['PLINTH_ACTION_TTL', 'actionTtlMs', 'duration'],
  ['PLINTH_ALLOWANCE_TTL', 'allowanceTtlMs', 'duration'],
  ['PLINTH_TOOL_OUTPUT_LIMIT', 'toolOutputLimit', 'int'],
  ['PLINTH_LLM_IDLE_TIMEOUT', 'llmIdleTimeoutMs', 'duration'],
  ['PLINTH_LLM_CALL_TIMEOUT', 'llmCallTimeoutMs', 'duration'],
  ['PLINTH_LLM_MAX_ANSWER_BYTES', 'llmMaxAnswerBytes', 'int'],
  ['PLINTH_LLM_MAX_OUTPUT_CHARS', 'llmMaxOutputChars', 'int'],
  ['PLINTH_LLM_MAX_TOOL_CALLS', 'llmMaxToolCalls', 'int'],
  ['PLINTH_LLM_CONCURRENCY', 'llmConcurrency', 'int'],
  ['PLINTH_LLM_CONCURRENCY_PER_USER', 'llmConcurrencyPerUser', 'int'],
  ['PLINTH_MAX_ACTIVE_RUNS_PER_USER', 'maxActiveRunsPerUser', 'int'],
  ['PLINTH_MAX_ACTIVE_RUNS_PER_PROJECT', 'runQuota.maxActiveRunsPerProject', 'int'],
  ['PLINTH_RUNS_PER_MINUTE_PER_USER', 'runQuota.runsPerMinutePerUser', 'int'],
  ['PLINTH_RUNS_PER_MINUTE_PER_PROJECT', 'runQuota.runsPerMinutePerProject', 'int'],
  ['PLINTH_RUN_QUOTA_OVER_LIMIT', 'runQuota.overLimit', 'string'],
  ['PLINTH_MAX_QUEUED_RUNS_PER_USER', 'runQuota.maxQueuedRunsPerUser', 'int'],
  ['PLINTH_RETENTION_RUN_EVENTS_DAYS', 'retention.runEventsDays', 'number'],
  ['PLINTH_RETENTION_IDLE_CONVERSATION_DAYS', 'retention.idleConversationDays', 'number'],
  ['PLINTH_RETENTION_DISPATCH_DAYS', 'retention.dispatchDays', 'number'],
  ['PLINTH_RETENTION_KNOWLEDGE_DRAFT_DAYS', 'retention.knowledgeDraftDays', 'number'],
  ['PLINTH_RETENTION_AUDIT_DAYS', 'retention.auditDays', 'number'],
  ['PLINTH_RETENTION_SWEEP', 'retention.sweepMs', 'duration'],
  ['PLINTH_COMPACTION_ENABLED', 'compaction.enabled', 'bool'],
  ['PLINTH_COMPACTION_THRESHOLD', 'compaction.threshold', 'number'],
  ['PLINTH_COMPACTION_KEEP_RECENT', 'compaction.keepRecent', 'number'],
  ['PLINTH_COMPACTION_MODEL', 'compaction.model', 'string'],
  ['PLINTH_SCHEDULES_ENABLED', 'schedules.enabled', 'bool'],
  ['PLINTH_SCHEDULE_TICK', 'schedules.tickMs', 'duration'],
  ['PLINTH_RUN_LEASE', 'runLeaseMs', 'duration'],
  ['PLINTH_RUN_MAX_RESUMES', 'runMaxResumes', 'int'],
  ['PLINTH_SHUTDOWN_GRACE', 'shutdownGraceMs', 'duration'],
  ['PLINTH_DATA_DIR_LOCK_WAIT', 'dataDirLockWaitMs', 'duration'],
  ['PLINTH_HIGH_RISK_KEYWORDS', 'highRiskKeywords', 'list'],
  ['PLINTH_RESULT_MAX_BYTES', 'resultMaxBytes', 'int'],
  ['PLINTH_PGLITE_SHARED_BUFFERS', 'pgliteSharedBuffers', 'string'],
  ['PLINTH_PGLITE_COMPILER', 'pgliteCompiler', 'string'],
  ['PLINTH_PG_PREPARE', 'pgPrepare', 'bool'],
  ['PLINTH_PG_SYNCHRONOUS_COMMIT', 'pgSynchronousCommit', 'bool'],
  ['PLINTH_WEBHOOK_ALLOW_PRIVATE', 'webhooks.allowPrivate', 'bool'],
  ['PLINTH_WEBHOOK_RETRY_BASE', 'webhooks.retryBaseMs', 'duration'],
  ['PLINTH_WEBHOOK_RETRY_WINDOW', 'webhooks.retryWindowMs', 'duration'],
  ['PLINTH_WEBHOOK_TIMEOUT', 'webhooks.timeoutMs', 'duration'],
  ['PLINTH_WEBHOOK_DISABLE_AFTER', 'webhooks.disableAfter', 'int'],
  ['PLINTH_WEBHOOK_SECRET_GRACE', 'webhooks.secretGraceMs', 'duration'],
]

/**
 * Old names that still work (milliseconds, as before) but warn at start-up: old name, new name, key.
 * The new name wins when both are set.
 */
export const deprecatedEnvKeys: Array<[string, string, string]> = [
  ['PLINTH_RATE_LIMIT_WINDOW_MS', 'PLINTH_RATE_LIMIT_WINDOW', 'rateLimit.windowMs'],
  ['PLINTH_SSE_HEARTBEAT_MS', 'PLINTH_SSE_HEARTBEAT', 'sseHeartbeatMs'],
  ['PLINTH_FULL_MODE_TTL_MS', 'PLINTH_FULL_MODE_TTL', 'fullModeTtlMs'],
]

const durationUnits: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }

export function parseEnv(raw: string, kind: EnvKind): unknown {
  if (kind === 'string') return raw
  if (kind === 'json') {
    try {
      return JSON.parse(raw) as unknown
    } catch {
      return undefined
    }
  }
  if (kind === 'number') return /^-?\d+(\.\d+)?$/.test(raw.trim()) ? Number(raw) : undefined
  if (kind === 'duration') {
    const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(raw.trim())
    return match ? Math.round(Number(match[1]) * (durationUnits[match[2] ?? 's'] ?? 1000)) : undefined
  }
  if (kind === 'list')
    return raw
      .split(',')
      .map((item) => item.trim())
      .filter(Boolean)
  if (kind === 'bool') return raw === 'true' || raw === '1' ? true : raw === 'false' || raw === '0' ? false : undefined
  return /^-?\d+$/.test(raw) ? Number(raw) : undefined
}

export function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const [head, ...rest] = path.split('.')
  if (!head) return
  if (rest.length === 0) {
    target[head] = value
    return
  }
  const child =
    typeof target[head] === 'object' && target[head] !== null ? (target[head] as Record<string, unknown>) : {}
  target[head] = child
  setPath(child, rest.join('.'), value)
}
