import { existsSync, readFileSync } from 'node:fs'
import { dirname, isAbsolute, resolve } from 'node:path'
import { Ajv, type ErrorObject } from 'ajv'
import type { ModelSettings } from '../llm/index.js'
import type { ExecSettings } from '../exec/index.js'
import type { DocumentExtractorOptions, EmbeddingSettings } from '../rag/index.js'
import type { McpServerConfig } from '../mcp/index.js'
import { defaultWebhookSettings, type WebhookSettings } from '../webhooks/index.js'

/** A model entry of the config file (docs/guides/agent-runs.md#models); the llm module defines its shape. */
export type ModelConfig = ModelSettings

/** The validated configuration the server runs with. */
/** The exec settings an operator may set (each optional; limits and quota by key). */
export type ExecConfig = Partial<Omit<ExecSettings, 'limits' | 'quota'>> & {
  limits?: Partial<ExecSettings['limits']>
  quota?: Partial<ExecSettings['quota']>
}

export interface PlinthConfig {
  port: number
  host: string
  databaseUrl?: string
  dataDir: string
  adminToken?: string
  plugins: string[]
  /** MCP servers whose tools become commands (`mcp.<server>.<tool>`; docs/mcp.md). */
  mcpServers: McpServerConfig[]
  /** Seals per-user MCP credentials at rest (PLINTH_SECRET_KEY; keep it out of the file). */
  secretKey?: string
  /** Authorization servers named in `/mcp`'s protected-resource metadata (RFC 9728), for OAuth-aware MCP clients. */
  mcpAuthorizationServers: string[]
  models: ModelConfig[]
  defaultModel?: string
  /**
   * What the operator set; the exec module fills in its defaults and checks them against
   * `resultMaxBytes` when the server starts (not loaded here: CLI commands that never run code stay light).
   */
  exec: ExecConfig
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'
  /** Largest accepted request body, bytes. */
  bodyLimit: number
  /**
   * Requests per token per window (`max`); before authentication, requests per client address
   * (`addressMax`) and failed authentications per address (`authFailureMax` per `authFailureWindowMs`).
   */
  rateLimit: { max: number; windowMs: number; addressMax: number; authFailureMax: number; authFailureWindowMs: number }
  /** The whole request must arrive within this long. */
  requestTimeoutMs: number
  /** A connection idle this long is closed (must exceed the SSE heartbeat). */
  connectionTimeoutMs: number
  /** Open connections per client address, and in total. */
  maxConnectionsPerAddress: number
  maxConnections: number
  /** Uploads (file PUTs, knowledge files) in flight per user and in all. */
  uploads: { perUser: number; total: number }
  /** Reverse proxies whose X-Forwarded-For is believed (addresses or CIDRs, comma-separated), or true for any. */
  trustProxy?: string | boolean
  /** Bearer token for `/metrics`; without it `/metrics` is open only when listening on loopback. */
  metricsToken?: string
  /** Origins browsers may call from; empty: CORS off. */
  corsOrigins: string[]
  /** A plugin that cannot load stops the server instead of being left out. */
  strictPlugins: boolean
  /** Interval of SSE heartbeat comments. */
  sseHeartbeatMs: number
  /** Event stream caps and lifetime. */
  streams: StreamSettings
  /** The embeddings provider (default: the local hashing embedder). */
  embeddings?: EmbeddingSettings
  /** Knowledge uploads, and the parser's limits (docs/security.md, "untrusted documents"). */
  knowledge: {
    maxFileBytes: number
    maxBytesPerUser: number
    extract?: DocumentExtractorOptions
    maxAttempts?: number
    minSimilarity?: number
  }
  /** How long a `full` permission mode lasts before reverting to `manual`. */
  fullModeTtlMs: number
  /** How long a pending decision (a run in `requires_action`) waits before it expires. */
  actionTtlMs: number
  /** How long an `approve_session` allowance lasts. */
  allowanceTtlMs: number
  /** Bytes of a tool result the model reads. */
  toolOutputLimit: number
  /** A model stream idle this long is aborted. */
  llmIdleTimeoutMs: number
  /** Model calls in flight across all runs (one per conversation always). */
  llmConcurrency: number
  /** Model calls one user may hold of those (default: half of llmConcurrency, rounded up). */
  llmConcurrencyPerUser?: number
  /** Runs one user may have queued or running at once. */
  maxActiveRunsPerUser: number
  /** A running run's lease: after a crash, another instance resumes the run once this has passed. */
  runLeaseMs: number
  /** Automatic resumes of one run before it ends failed (interrupted). */
  runMaxResumes: number
  /** How long a graceful stop lets tool calls in flight finish. */
  shutdownGraceMs: number
  /** Embedded database: how long `serve` waits for a process still holding the data directory (PLINTH_DATA_DIR_LOCK_WAIT). */
  dataDirLockWaitMs: number
  /** Operator high-risk keywords: a command string containing one (case-sensitive) is high risk. */
  highRiskKeywords: string[]
  /** Largest command result (JSON bytes). */
  resultMaxBytes: number
  /** The embedded database's shared buffers (e.g. `16MB`, `64MB`). */
  pgliteSharedBuffers: string
  /** Postgres: prepare repeated statements per connection (off behind a proxy that cannot keep them). */
  pgPrepare: boolean
  /** Webhook delivery: retries, timeouts, SSRF rules (docs/webhooks.md). */
  webhooks: WebhookSettings
  /** One line per deprecated environment variable that was set, naming its replacement (logged at start-up). */
  deprecations?: string[]
}

export interface StreamSettings {
  maxPerToken: number
  maxTotal: number
  maxLifetimeMs: number
  recheckIntervalMs: number
  drainTimeoutMs: number
}

/** Thrown with every bad key at once, so an operator fixes them in one go. */
export class ConfigError extends Error {
  readonly problems: string[]

  constructor(problems: string[]) {
    super(`invalid configuration:\n${problems.map((problem) => `  - ${problem}`).join('\n')}`)
    this.name = 'ConfigError'
    this.problems = problems
  }
}

const stringMap = { type: 'object', additionalProperties: { type: 'string' } } as const
const riskLevel = { enum: ['low', 'medium', 'high'] } as const
/** One `mcpServers[]` entry (docs/mcp.md, "Configuration"). */
const mcpServerSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['name', 'transport'],
  properties: {
    // A command id segment: the tools become mcp.<name>.<tool>.
    name: { type: 'string', pattern: '^[a-z][a-z0-9]*(_[a-z0-9]+)*$', maxLength: 40 },
    transport: { enum: ['stdio', 'http'] },
    command: { type: 'string', minLength: 1 },
    args: { type: 'array', items: { type: 'string' } },
    env: stringMap,
    envFrom: stringMap,
    cwd: { type: 'string', minLength: 1 },
    url: { type: 'string', pattern: '^https?://' },
    headers: stringMap,
    headersEnv: stringMap,
    tools: {
      type: 'object',
      additionalProperties: false,
      properties: {
        include: { type: 'array', items: { type: 'string' } },
        exclude: { type: 'array', items: { type: 'string' } },
      },
    },
    risk: {
      type: 'object',
      additionalProperties: false,
      properties: { default: riskLevel, perTool: { type: 'object', additionalProperties: riskLevel } },
    },
    confirm: { anyOf: [{ type: 'boolean' }, { type: 'array', items: { type: 'string' } }] },
    exposeAsTool: { type: 'boolean' },
    timeoutMs: { type: 'integer', minimum: 100, maximum: 3_600_000 },
    startTimeoutMs: { type: 'integer', minimum: 100, maximum: 600_000 },
    auth: {
      type: 'object',
      additionalProperties: false,
      required: ['type'],
      properties: { type: { enum: ['oauth'] }, scopes: { type: 'array', items: { type: 'string', minLength: 1 } } },
    },
    sandbox: { type: 'boolean' },
    network: { type: 'boolean' },
    mounts: { type: 'array', maxItems: 50, items: { type: 'string', minLength: 1 } },
    idleTimeoutMs: { type: 'integer', minimum: 1000, maximum: 86_400_000 },
    maxProcesses: { type: 'integer', minimum: 1, maximum: 1000 },
  },
} as const

/** Keys that mean something only for a sandboxed server. */
const sandboxOnlyKeys = ['network', 'mounts', 'idleTimeoutMs', 'maxProcesses'] as const

const fileSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    port: { type: 'integer', minimum: 0, maximum: 65535 },
    host: { type: 'string', minLength: 1 },
    databaseUrl: { type: 'string', pattern: '^postgres(ql)?://' },
    dataDir: { type: 'string', minLength: 1 },
    adminToken: { type: 'string', minLength: 16 },
    plugins: { type: 'array', items: { type: 'string', minLength: 1 } },
    mcpServers: { type: 'array', maxItems: 100, items: mcpServerSchema },
    secretKey: { type: 'string', minLength: 16 },
    mcpAuthorizationServers: { type: 'array', maxItems: 20, items: { type: 'string', pattern: '^https?://' } },
    strictPlugins: { type: 'boolean' },
    models: {
      type: 'array',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['id', 'provider'],
        properties: {
          id: { type: 'string', minLength: 1 },
          provider: { enum: ['openai', 'anthropic', 'scripted'] },
          model: { type: 'string' },
          baseUrl: { type: 'string' },
          apiKeyEnv: { type: 'string' },
          contextWindow: { type: 'integer', minimum: 1 },
          supportsTools: { type: 'boolean' },
          script: { type: 'string' },
          temperature: { type: 'number', minimum: 0, maximum: 2 },
          maxTokens: { type: 'integer', minimum: 1, maximum: 1_000_000 },
          topP: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
          stop: { type: 'array', maxItems: 4, items: { type: 'string', minLength: 1, maxLength: 100 } },
          headers: {
            type: 'object',
            additionalProperties: { type: 'string' },
            propertyNames: { pattern: '^[A-Za-z0-9-]+$' },
          },
        },
      },
    },
    defaultModel: { type: 'string' },
    exec: {
      type: 'object',
      additionalProperties: false,
      properties: {
        backend: { enum: ['auto', 'direct', 'sandbox'] },
        disableExecTools: { type: 'boolean' },
        sandboxUser: { type: 'string', pattern: '^[a-z_][a-z0-9_-]*$' },
        workRoot: { type: 'string', minLength: 1 },
        requireCgroups: { type: 'boolean' },
        allowMultiline: { type: 'boolean' },
        timeoutMs: { type: 'integer', minimum: 100, maximum: 3_600_000 },
        limits: {
          type: 'object',
          additionalProperties: false,
          properties: {
            memoryMb: { type: 'integer', minimum: 16 },
            pids: { type: 'integer', minimum: 8 },
            cpuSeconds: { type: 'integer', minimum: 1 },
            fileSizeMb: { type: 'integer', minimum: 1 },
            outputBytes: { type: 'integer', minimum: 1024 },
          },
        },
        network: { type: 'boolean' },
        tmpSizeMb: { type: 'integer', minimum: 1 },
        runtimes: {
          type: 'object',
          additionalProperties: { type: 'string', pattern: '^/' },
          propertyNames: { pattern: '^[a-z][a-z0-9_-]{0,40}$' },
        },
        deniedSegments: { type: 'array', items: { type: 'string', minLength: 1 } },
        maxCodeBytes: { type: 'integer', minimum: 1024 },
        maxUploadBytes: { type: 'integer', minimum: 1024 },
        maxDownloadBytes: { type: 'integer', minimum: 1024 },
        directApprovers: { type: 'array', items: { type: 'string', minLength: 1, maxLength: 200 }, maxItems: 100 },
        quota: {
          type: 'object',
          additionalProperties: false,
          properties: {
            conversationBytes: { type: 'integer', minimum: 1024 },
            userBytes: { type: 'integer', minimum: 1024 },
            conversationFiles: { type: 'integer', minimum: 10 },
          },
        },
        cliTools: {
          type: 'array',
          items: {
            type: 'object',
            required: ['name', 'description', 'binary', 'commands'],
            properties: {
              name: { type: 'string' },
              description: { type: 'string' },
              binary: { type: 'string' },
              commands: { type: 'object' },
              env: {
                type: 'object',
                additionalProperties: { type: 'string', maxLength: 4096 },
                propertyNames: { pattern: '^[A-Za-z_][A-Za-z0-9_]{0,127}$' },
              },
            },
          },
        },
      },
    },
    logLevel: { enum: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] },
    bodyLimit: { type: 'integer', minimum: 1024 },
    rateLimit: {
      type: 'object',
      additionalProperties: false,
      properties: {
        max: { type: 'integer', minimum: 1 },
        windowMs: { type: 'integer', minimum: 1 },
        addressMax: { type: 'integer', minimum: 1 },
        authFailureMax: { type: 'integer', minimum: 1 },
        authFailureWindowMs: { type: 'integer', minimum: 1000 },
      },
    },
    requestTimeoutMs: { type: 'integer', minimum: 100 },
    connectionTimeoutMs: { type: 'integer', minimum: 1000 },
    maxConnectionsPerAddress: { type: 'integer', minimum: 1 },
    maxConnections: { type: 'integer', minimum: 1 },
    uploads: {
      type: 'object',
      additionalProperties: false,
      properties: { perUser: { type: 'integer', minimum: 1 }, total: { type: 'integer', minimum: 1 } },
    },
    trustProxy: { anyOf: [{ type: 'boolean' }, { type: 'string', minLength: 1 }] },
    metricsToken: { type: 'string', minLength: 16 },
    corsOrigins: { type: 'array', items: { type: 'string', pattern: '^https?://[^/\\s]+$' } },
    sseHeartbeatMs: { type: 'integer', minimum: 100 },
    embeddings: {
      type: 'object',
      additionalProperties: false,
      required: ['provider'],
      properties: {
        provider: { enum: ['hash', 'openai'] },
        model: { type: 'string', minLength: 1 },
        baseUrl: { type: 'string', pattern: '^https?://' },
        apiKeyEnv: { type: 'string', minLength: 1 },
        dimensions: { type: 'integer', minimum: 8, maximum: 4000 },
      },
    },
    knowledge: {
      type: 'object',
      additionalProperties: false,
      properties: {
        maxFileBytes: { type: 'integer', minimum: 1024 },
        maxBytesPerUser: { type: 'integer', minimum: 1024 },
        maxAttempts: { type: 'integer', minimum: 1, maximum: 100 },
        minSimilarity: { type: 'number', minimum: -1, maximum: 1 },
        extract: {
          type: 'object',
          additionalProperties: false,
          properties: {
            heapMb: { type: 'integer', minimum: 32 },
            rssMb: { type: 'integer', minimum: 64 },
            timeoutMs: { type: 'integer', minimum: 1000 },
            limits: {
              type: 'object',
              additionalProperties: false,
              properties: {
                maxChars: { type: 'integer', minimum: 1000 },
                maxPages: { type: 'integer', minimum: 1 },
                maxDecompressedBytes: { type: 'integer', minimum: 1024 },
                maxZipRatio: { type: 'integer', minimum: 2 },
                maxZipEntries: { type: 'integer', minimum: 1 },
                maxNesting: { type: 'integer', minimum: 8 },
              },
            },
          },
        },
      },
    },
    streams: {
      type: 'object',
      additionalProperties: false,
      properties: {
        maxPerToken: { type: 'integer', minimum: 1 },
        maxTotal: { type: 'integer', minimum: 1 },
        maxLifetimeMs: { type: 'integer', minimum: 1000 },
        recheckIntervalMs: { type: 'integer', minimum: 100 },
        drainTimeoutMs: { type: 'integer', minimum: 100 },
      },
    },
    fullModeTtlMs: { type: 'integer', minimum: 1000 },
    actionTtlMs: { type: 'integer', minimum: 1000 },
    allowanceTtlMs: { type: 'integer', minimum: 1000 },
    toolOutputLimit: { type: 'integer', minimum: 256 },
    llmIdleTimeoutMs: { type: 'integer', minimum: 100 },
    llmConcurrency: { type: 'integer', minimum: 1, maximum: 1024 },
    llmConcurrencyPerUser: { type: 'integer', minimum: 1, maximum: 1024 },
    maxActiveRunsPerUser: { type: 'integer', minimum: 1, maximum: 100000 },
    runLeaseMs: { type: 'integer', minimum: 1000 },
    runMaxResumes: { type: 'integer', minimum: 0, maximum: 100 },
    shutdownGraceMs: { type: 'integer', minimum: 0 },
    dataDirLockWaitMs: { type: 'integer', minimum: 0, maximum: 600_000 },
    highRiskKeywords: { type: 'array', maxItems: 200, items: { type: 'string', minLength: 1, maxLength: 200 } },
    resultMaxBytes: { type: 'integer', minimum: 32 * 1024, maximum: 64 * 1024 * 1024 },
    pgliteSharedBuffers: { type: 'string', pattern: '^[1-9][0-9]{0,5}(kB|MB|GB)$' },
    pgPrepare: { type: 'boolean' },
    webhooks: {
      type: 'object',
      additionalProperties: false,
      properties: {
        allowPrivate: { type: 'boolean' },
        retryBaseMs: { type: 'integer', minimum: 1, maximum: 3_600_000 },
        retryWindowMs: { type: 'integer', minimum: 1000, maximum: 7 * 86_400_000 },
        timeoutMs: { type: 'integer', minimum: 100, maximum: 120_000 },
        disableAfter: { type: 'integer', minimum: 1, maximum: 100_000 },
        secretGraceMs: { type: 'integer', minimum: 0, maximum: 30 * 86_400_000 },
      },
    },
  },
} as const

/** How an environment variable's text is read. */
export type EnvKind = 'string' | 'int' | 'number' | 'bool' | 'list' | 'duration' | 'json'

/**
 * Environment variables and the config key each one sets. A time is a duration (`30s`, `15m`; a bare
 * number is seconds) named without a unit suffix.
 */
const envKeys: Array<[string, string, EnvKind]> = [
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
  ['PLINTH_UPLOADS_PER_USER', 'uploads.perUser', 'int'],
  ['PLINTH_UPLOADS_TOTAL', 'uploads.total', 'int'],
  ['PLINTH_EXTRACT_TIMEOUT', 'knowledge.extract.timeoutMs', 'duration'],
  ['PLINTH_EXTRACT_MEMORY_MB', 'knowledge.extract.rssMb', 'int'],
  ['PLINTH_KNOWLEDGE_MIN_SIMILARITY', 'knowledge.minSimilarity', 'number'],
  ['PLINTH_FULL_MODE_TTL', 'fullModeTtlMs', 'duration'],
  ['PLINTH_ACTION_TTL', 'actionTtlMs', 'duration'],
  ['PLINTH_ALLOWANCE_TTL', 'allowanceTtlMs', 'duration'],
  ['PLINTH_TOOL_OUTPUT_LIMIT', 'toolOutputLimit', 'int'],
  ['PLINTH_LLM_IDLE_TIMEOUT', 'llmIdleTimeoutMs', 'duration'],
  ['PLINTH_LLM_CONCURRENCY', 'llmConcurrency', 'int'],
  ['PLINTH_LLM_CONCURRENCY_PER_USER', 'llmConcurrencyPerUser', 'int'],
  ['PLINTH_MAX_ACTIVE_RUNS_PER_USER', 'maxActiveRunsPerUser', 'int'],
  ['PLINTH_RUN_LEASE', 'runLeaseMs', 'duration'],
  ['PLINTH_RUN_MAX_RESUMES', 'runMaxResumes', 'int'],
  ['PLINTH_SHUTDOWN_GRACE', 'shutdownGraceMs', 'duration'],
  ['PLINTH_DATA_DIR_LOCK_WAIT', 'dataDirLockWaitMs', 'duration'],
  ['PLINTH_HIGH_RISK_KEYWORDS', 'highRiskKeywords', 'list'],
  ['PLINTH_RESULT_MAX_BYTES', 'resultMaxBytes', 'int'],
  ['PLINTH_PGLITE_SHARED_BUFFERS', 'pgliteSharedBuffers', 'string'],
  ['PLINTH_PG_PREPARE', 'pgPrepare', 'bool'],
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
const deprecatedEnvKeys: Array<[string, string, string]> = [
  ['PLINTH_RATE_LIMIT_WINDOW_MS', 'PLINTH_RATE_LIMIT_WINDOW', 'rateLimit.windowMs'],
  ['PLINTH_SSE_HEARTBEAT_MS', 'PLINTH_SSE_HEARTBEAT', 'sseHeartbeatMs'],
  ['PLINTH_FULL_MODE_TTL_MS', 'PLINTH_FULL_MODE_TTL', 'fullModeTtlMs'],
]

const defaults: PlinthConfig = {
  port: 8080,
  host: '127.0.0.1',
  dataDir: './data',
  plugins: [],
  mcpServers: [],
  mcpAuthorizationServers: [],
  models: [],
  exec: {},
  logLevel: 'info',
  bodyLimit: 1024 * 1024,
  rateLimit: { max: 600, windowMs: 60_000, addressMax: 2400, authFailureMax: 20, authFailureWindowMs: 60_000 },
  requestTimeoutMs: 30_000,
  connectionTimeoutMs: 120_000,
  maxConnectionsPerAddress: 256,
  maxConnections: 10_000,
  uploads: { perUser: 2, total: 8 },
  corsOrigins: [],
  strictPlugins: false,
  sseHeartbeatMs: 15_000,
  streams: {
    maxPerToken: 32,
    maxTotal: 5000,
    maxLifetimeMs: 60 * 60 * 1000,
    recheckIntervalMs: 60_000,
    drainTimeoutMs: 30_000,
  },
  knowledge: { maxFileBytes: 20 * 1024 * 1024, maxBytesPerUser: 1024 * 1024 * 1024 },
  fullModeTtlMs: 60 * 60 * 1000,
  actionTtlMs: 24 * 60 * 60 * 1000,
  allowanceTtlMs: 8 * 60 * 60 * 1000,
  toolOutputLimit: 4096,
  llmIdleTimeoutMs: 60_000,
  llmConcurrency: 16,
  maxActiveRunsPerUser: 10,
  runLeaseMs: 30_000,
  runMaxResumes: 3,
  shutdownGraceMs: 10_000,
  dataDirLockWaitMs: 15_000,
  highRiskKeywords: [],
  resultMaxBytes: 1024 * 1024,
  pgliteSharedBuffers: '16MB',
  pgPrepare: true,
  webhooks: defaultWebhookSettings,
}

/**
 * Reads `PLINTH_CONFIG` (default `./plinth.config.json`, optional unless named explicitly) and the
 * environment, environment winning, and validates the result. Throws ConfigError listing every
 * bad key.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, cwd: string = process.cwd()): PlinthConfig {
  const problems: string[] = []
  const merged: Record<string, unknown> = {}

  const explicitPath = env.PLINTH_CONFIG
  const path = resolve(cwd, explicitPath ?? 'plinth.config.json')
  if (explicitPath || existsSync(path)) {
    try {
      const parsed: unknown = JSON.parse(readFileSync(path, 'utf8'))
      if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
        problems.push(`${path}: must hold a JSON object`)
      else {
        Object.assign(merged, parsed)
        resolveFilePaths(merged, dirname(path))
      }
    } catch (error) {
      problems.push(`${path}: ${(error as Error).message}`)
    }
  }

  const deprecations: string[] = []
  const fromEnv = (name: string, key: string, kind: EnvKind): void => {
    const raw = env[name]
    if (raw === undefined || raw === '') return
    const value = parseEnv(raw, kind)
    if (value === undefined) {
      const expected =
        kind === 'int'
          ? 'an integer'
          : kind === 'number'
            ? 'a number like 0.3'
            : kind === 'duration'
              ? 'a duration like 30s, 15m, 8h or 1d (a bare number is seconds)'
              : kind === 'json'
                ? 'JSON'
                : 'true or false'
      problems.push(`${name}: expected ${expected}, got ${JSON.stringify(raw)}`)
      return
    }
    setPath(merged, key, value)
  }
  // Deprecated names first, so the current name wins when both are set.
  for (const [name, replacement, key] of deprecatedEnvKeys) {
    if (env[name] === undefined || env[name] === '') continue
    deprecations.push(
      `${name} is deprecated: use ${replacement} (a duration like 30s; a bare number is seconds)${env[replacement] ? `; ${replacement} is also set and wins` : ''}`,
    )
    fromEnv(name, key, 'int')
  }
  for (const [name, key, kind] of envKeys) fromEnv(name, key, kind)

  const ajv = new Ajv({ allErrors: true, strict: false })
  if (!ajv.validate(fileSchema, merged)) problems.push(...(ajv.errors ?? []).map((error) => describeError(error)))
  const models = Array.isArray(merged.models)
    ? (merged.models as Array<{ id?: unknown; provider?: unknown; baseUrl?: unknown; script?: unknown }>)
    : []
  models.forEach((model, index) => {
    if ((model?.provider === 'openai' || model?.provider === 'anthropic') && typeof model.baseUrl !== 'string')
      problems.push(`models[${index}].baseUrl: required for provider ${String(model.provider)}`)
    if (model?.provider === 'scripted' && typeof model.script !== 'string')
      problems.push(`models[${index}].script: required for provider scripted`)
    else if (model?.provider === 'scripted') {
      const problem = scriptProblem(resolve(cwd, model.script as string))
      if (problem) problems.push(`models[${index}].script: ${problem}`)
    }
  })
  problems.push(...mcpServerProblems(merged.mcpServers))
  const embeddings = merged.embeddings as
    { provider?: unknown; model?: unknown; baseUrl?: unknown; dimensions?: unknown } | undefined
  if (embeddings?.provider === 'openai') {
    for (const key of ['model', 'baseUrl', 'dimensions'] as const)
      if (embeddings[key] === undefined) problems.push(`embeddings.${key}: required for provider openai`)
  }
  if (typeof merged.defaultModel === 'string' && !models.some((model) => model?.id === merged.defaultModel)) {
    problems.push(`defaultModel: no model with id ${JSON.stringify(merged.defaultModel)} is configured`)
  }
  if (problems.length > 0) throw new ConfigError(problems)

  const file = merged as Partial<PlinthConfig>
  const config: PlinthConfig = {
    ...defaults,
    ...file,
    exec: { ...file.exec },
    uploads: { ...defaults.uploads, ...file.uploads },
    rateLimit: { ...defaults.rateLimit, ...file.rateLimit },
    streams: { ...defaults.streams, ...file.streams },
    knowledge: { ...defaults.knowledge, ...file.knowledge },
    webhooks: { ...defaults.webhooks, ...file.webhooks },
    dataDir: resolve(cwd, file.dataDir ?? defaults.dataDir),
    ...(deprecations.length > 0 && { deprecations }),
  }
  if (config.exec.workRoot) config.exec.workRoot = resolve(cwd, config.exec.workRoot)
  if (config.trustProxy === 'true' || config.trustProxy === 'false') config.trustProxy = config.trustProxy === 'true'
  // Heartbeats are what keep a quiet stream's connection from looking idle.
  if (config.sseHeartbeatMs >= config.connectionTimeoutMs) {
    throw new ConfigError([
      `sseHeartbeatMs (${config.sseHeartbeatMs}) must be shorter than connectionTimeoutMs (${config.connectionTimeoutMs})`,
    ])
  }
  return config
}

/** One setting as docs/reference/configuration.md lists it (written by `npm run docs`). */
export interface ConfigSetting {
  /** Dotted file key, e.g. `exec.limits.outputBytes`. */
  key: string
  /** The environment variables that set it. */
  env: Array<{ name: string; kind: EnvKind }>
  /** Its JSON schema in the config file. */
  schema: Readonly<Record<string, unknown>>
  /** Its default here; undefined where another module fills it in (exec, knowledge extraction). */
  defaultValue: unknown
}

/**
 * Every setting of the config file, in schema order: objects of named keys are listed key by key,
 * anything else (arrays, maps, `embeddings`) as one setting.
 */
export function configSettings(): ConfigSetting[] {
  const settings: ConfigSetting[] = []
  const walk = (
    properties: Readonly<Record<string, Readonly<Record<string, unknown>>>>,
    prefix: string,
    defaultsHere: unknown,
  ): void => {
    for (const [name, schema] of Object.entries(properties)) {
      const key = `${prefix}${name}`
      const value =
        defaultsHere !== null && typeof defaultsHere === 'object'
          ? (defaultsHere as Record<string, unknown>)[name]
          : undefined
      if (schema.type === 'object' && schema.properties && !schema.required) {
        walk(schema.properties as Record<string, Readonly<Record<string, unknown>>>, `${key}.`, value)
        continue
      }
      const env = envKeys.filter(([, target]) => target === key).map(([envName, , kind]) => ({ name: envName, kind }))
      settings.push({ key, env, schema, defaultValue: value })
    }
  }
  walk(fileSchema.properties, '', defaults)
  return settings
}

const durationUnits: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }

function parseEnv(raw: string, kind: EnvKind): unknown {
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

function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
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

/**
 * Paths in the config file are relative to the file (a plugin or script next to its config), whatever
 * the working directory; paths from the environment stay relative to the working directory.
 */
function resolveFilePaths(config: Record<string, unknown>, base: string): void {
  const path = (value: unknown): unknown => (typeof value === 'string' && value !== '' ? resolve(base, value) : value)
  // A bare plugin name is a package; only `./` and `../` entries are paths.
  if (Array.isArray(config.plugins))
    config.plugins = config.plugins.map((entry: unknown) =>
      typeof entry === 'string' && entry.startsWith('.') ? resolve(base, entry) : entry,
    )
  if (Array.isArray(config.models)) {
    config.models = config.models.map((model: unknown) =>
      model && typeof model === 'object' && 'script' in model
        ? { ...model, script: path((model as { script: unknown }).script) }
        : model,
    )
  }
  if ('dataDir' in config) config.dataDir = path(config.dataDir)
  // A stdio MCP server's working directory is relative to the file; its command is looked up as a shell would.
  if (Array.isArray(config.mcpServers)) {
    config.mcpServers = config.mcpServers.map((server: unknown) => {
      if (!server || typeof server !== 'object') return server
      const entry = { ...(server as Record<string, unknown>) }
      if ('cwd' in entry) entry.cwd = path(entry.cwd)
      // A sandboxed server's read-only mounts too.
      if (Array.isArray(entry.mounts)) entry.mounts = entry.mounts.map(path)
      return entry
    })
  }
  const exec = config.exec as Record<string, unknown> | undefined
  if (exec && typeof exec === 'object' && 'workRoot' in exec) config.exec = { ...exec, workRoot: path(exec.workRoot) }
}

/** What a schema cannot say of `mcpServers`: each transport's required keys, unique names. */
/**
 * Problems of an MCP server a plugin declares (`Registry.addMcpServer`): the checks a configured one
 * gets, named without the `mcpServers[i].` prefix. Only absolute paths make sense there (no file to be
 * relative to).
 */
export function mcpServerSpecProblems(spec: unknown): string[] {
  const ajv = new Ajv({ allErrors: true, strict: false })
  const problems = ajv.validate(mcpServerSchema, spec) ? [] : (ajv.errors ?? []).map((error) => describeError(error))
  problems.push(...mcpServerProblems([spec]))
  const record = spec !== null && typeof spec === 'object' ? (spec as Record<string, unknown>) : {}
  if (typeof record.cwd === 'string' && !isAbsolute(record.cwd)) problems.push('cwd: must be an absolute path')
  // The operator's to set (in an mcpServers entry of the same name), not the plugin's.
  for (const key of ['auth', 'idleTimeoutMs', 'maxProcesses'])
    if (key in record) problems.push(`${key}: not for a server a plugin ships (the operator sets it in mcpServers)`)
  return problems.map((problem) => problem.replace(/^mcpServers\[0\]\./, '').replace(/^\(root\): /, ''))
}

function mcpServerProblems(servers: unknown): string[] {
  if (!Array.isArray(servers)) return []
  const problems: string[] = []
  const seen = new Set<string>()
  servers.forEach(
    (
      server: {
        name?: unknown
        transport?: unknown
        command?: unknown
        url?: unknown
        sandbox?: unknown
        mounts?: unknown
      } | null,
      index,
    ) => {
      if (!server || typeof server !== 'object') return
      if (server.transport === 'stdio' && typeof server.command !== 'string')
        problems.push(`mcpServers[${index}].command: required for transport stdio`)
      if (server.transport === 'http' && typeof server.url !== 'string')
        problems.push(`mcpServers[${index}].url: required for transport http`)
      if (server.transport === 'stdio' && 'auth' in server)
        problems.push(`mcpServers[${index}].auth: OAuth applies to transport http only`)
      if (server.sandbox === true && server.transport !== 'stdio')
        problems.push(`mcpServers[${index}].sandbox: only for transport stdio`)
      if (server.sandbox === true && 'cwd' in server)
        problems.push(
          `mcpServers[${index}].cwd: not with sandbox (a sandboxed server runs in the conversation's work directory)`,
        )
      for (const key of sandboxOnlyKeys)
        if (key in server && server.sandbox !== true)
          problems.push(`mcpServers[${index}].${key}: only with sandbox: true`)
      if (Array.isArray(server.mounts)) {
        server.mounts.forEach((mount: unknown, at) => {
          if (typeof mount === 'string' && !isAbsolute(mount))
            problems.push(
              `mcpServers[${index}].mounts[${at}]: must be an absolute path (in the file: relative to the file)`,
            )
        })
      }
      if (typeof server.name === 'string') {
        if (seen.has(server.name))
          problems.push(`mcpServers[${index}].name: ${JSON.stringify(server.name)} is used twice`)
        seen.add(server.name)
      }
    },
  )
  return problems
}

/** Why a scripted model's script cannot be used, or null. */
function scriptProblem(file: string): string | null {
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    return code === 'ENOENT' ? `no such file: ${file}` : `cannot read ${file} (${code ?? (error as Error).message})`
  }
  try {
    const script: unknown = JSON.parse(text)
    const turns = Array.isArray(script) ? script : (script as { turns?: unknown } | null)?.turns
    return Array.isArray(turns) ? null : `${file} must hold an array of turns or {turns: [...]}`
  } catch (error) {
    return `${file} is not JSON: ${(error as Error).message}`
  }
}

function describeError(error: ErrorObject): string {
  // models/2/script → models[2].script
  const key =
    error.instancePath
      .replace(/^\//, '')
      .replace(/\/(\d+)(?=\/|$)/g, '[$1]')
      .replace(/\//g, '.') || '(root)'
  if (error.keyword === 'additionalProperties') {
    const extra = (error.params as { additionalProperty: string }).additionalProperty
    return `${key === '(root)' ? '' : `${key}.`}${extra}: unknown key`
  }
  if (error.keyword === 'enum')
    return `${key}: must be one of ${(error.params as { allowedValues: unknown[] }).allowedValues.join(', ')}`
  return `${key}: ${error.message ?? 'is invalid'}`
}
