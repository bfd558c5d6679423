import { existsSync, readFileSync } from 'node:fs'
import { isIP } from 'node:net'
import { dirname, isAbsolute, resolve } from 'node:path'
import type { ErrorObject } from 'ajv'
import { defaultAnswerLimits, defaultUpstreamLimits, fallbackProblems, type ModelSettings } from '../llm/index.js'
import type { CompactionSettings, RetentionSettings, RunQuota } from '../runmgr/index.js'
import type { ExecSettings } from '../exec/index.js'
import type { DocumentExtractorOptions, EmbeddingSettings } from '../rag/index.js'
import type { McpServerConfig } from '../mcp/index.js'
import type { WebhookSettings } from '../webhooks/index.js'
import { deprecatedEnvKeys, envKeys, parseEnv, setPath, type EnvKind } from './config-env.js'
import { fileSchema, sandboxOnlyKeys } from './config-file-schema.js'
import * as compiled from './config-validator.generated.js'

/** A validator Ajv compiled ahead of time (scripts/config-validator.ts): the errors of its last call. */
type Validator = ((data: unknown) => boolean) & { errors?: ErrorObject[] | null }
const validateFile = compiled.validateFile as Validator
const validateMcpServer = compiled.validateMcpServer as Validator

export type { EnvKind } from './config-env.js'

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
  /** The currency of `models[].pricing` and of every cost (ISO 4217 code). */
  currency: string
  /** Every run's budget unless its request sets its own limits (docs/guides/operating.md#budgets). */
  runBudget: { maxModelCalls?: number; maxTokens?: number; maxCost?: number }
  /** Limits on starting runs beyond `maxActiveRunsPerUser`, counted in the database (docs/guides/operating.md#run-quotas). */
  runQuota: RunQuota
  retention: RetentionSettings
  /** Context compaction of long conversations (docs/guides/agent-runs.md#context-compaction). */
  compaction: Partial<CompactionSettings>
  /** Whether this instance fires due schedules, and how often it looks (docs/guides/schedules.md). */
  schedules: { enabled: boolean; tickMs: number }
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
  /** New runs refused (503 `overloaded`) while the event loop or the database is this late (docs/guides/scaling.md#overload). */
  overload: {
    maxEventLoopDelayMs: number
    maxDatabaseWaitMs: number
    maxAdmitMs: number
    maxActiveRuns: number
    adaptiveCapSeconds: number
    retryAfterSeconds: number
  }
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
  /** A model call taking longer than this in all is aborted. */
  llmCallTimeoutMs: number
  /** Bytes of one model answer as received (the wire format's framing included). */
  llmMaxAnswerBytes: number
  /** Characters of text and tool-call arguments in one model answer. */
  llmMaxOutputChars: number
  /** Tool calls in one model answer. */
  llmMaxToolCalls: number
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
  /**
   * How `plinth serve` compiles the embedded database (Postgres in WebAssembly): `baseline` only, or
   * also `optimizing` its hot code (src/app/wasm-compiler.ts).
   */
  pgliteCompiler: 'baseline' | 'optimizing'
  /** Postgres: prepare repeated statements per connection (off behind a proxy that cannot keep them). */
  pgPrepare: boolean
  /**
   * Postgres: whether the server's commits wait for their WAL flush (docs/guides/operating.md#storage).
   * Off trades the last few hundred milliseconds of acknowledged writes on a Postgres crash for throughput.
   */
  pgSynchronousCommit: boolean
  /** Webhook delivery: retries, timeouts, SSRF rules (docs/webhooks.md). */
  webhooks: Partial<WebhookSettings>
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

const defaults: PlinthConfig = {
  port: 8080,
  host: '127.0.0.1',
  dataDir: './data',
  plugins: [],
  mcpServers: [],
  mcpAuthorizationServers: [],
  models: [],
  currency: 'USD',
  runBudget: {},
  runQuota: {},
  retention: {},
  compaction: {},
  schedules: { enabled: true, tickMs: 1000 },
  exec: {},
  logLevel: 'info',
  bodyLimit: 1024 * 1024,
  rateLimit: { max: 600, windowMs: 60_000, addressMax: 2400, authFailureMax: 20, authFailureWindowMs: 60_000 },
  requestTimeoutMs: 30_000,
  connectionTimeoutMs: 120_000,
  maxConnectionsPerAddress: 256,
  maxConnections: 10_000,
  uploads: { perUser: 2, total: 8 },
  overload: {
    maxEventLoopDelayMs: 2000,
    maxDatabaseWaitMs: 1000,
    maxAdmitMs: 0,
    maxActiveRuns: 256,
    adaptiveCapSeconds: 2,
    retryAfterSeconds: 2,
  },
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
  llmIdleTimeoutMs: defaultUpstreamLimits.idleTimeoutMs,
  llmCallTimeoutMs: defaultUpstreamLimits.callTimeoutMs,
  llmMaxAnswerBytes: defaultUpstreamLimits.maxAnswerBytes,
  llmMaxOutputChars: defaultAnswerLimits.maxOutputChars,
  llmMaxToolCalls: defaultAnswerLimits.maxToolCalls,
  llmConcurrency: 16,
  maxActiveRunsPerUser: 10,
  runLeaseMs: 30_000,
  runMaxResumes: 3,
  shutdownGraceMs: 10_000,
  dataDirLockWaitMs: 15_000,
  highRiskKeywords: [],
  resultMaxBytes: 1024 * 1024,
  pgliteSharedBuffers: '16MB',
  pgliteCompiler: 'baseline',
  pgPrepare: true,
  pgSynchronousCommit: true,
  // Filled in by the webhooks module (not imported here: the CLI reads this file without it).
  webhooks: {},
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

  if (!validateFile(merged)) problems.push(...(validateFile.errors ?? []).map((error) => describeError(error)))
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
  problems.push(...fallbackProblems(models))
  // PGlite does not start with 2GB or more (it fails with a message that names nothing); 1536MB does.
  const buffers = /^(\d+)(kB|MB|GB)$/.exec(String(merged.pgliteSharedBuffers ?? ''))
  if (
    buffers &&
    Number(buffers[1]) * { kB: 1, MB: 1024, GB: 1024 * 1024 }[buffers[2] as 'kB' | 'MB' | 'GB'] > 1536 * 1024
  )
    problems.push(
      `pgliteSharedBuffers: at most 1536MB (the embedded database does not start with more), got ${buffers[0]}`,
    )
  // One id, one model: a second entry would silently serve the id in the first one's place.
  models.forEach((model, index) => {
    const first = models.findIndex((other) => other?.id === model?.id)
    if (typeof model?.id === 'string' && first < index)
      problems.push(`models[${index}].id: ${JSON.stringify(model.id)} is already the id of models[${first}]`)
  })
  const compaction = merged.compaction as { model?: unknown; threshold?: unknown; keepRecent?: unknown } | undefined
  if (typeof compaction?.model === 'string' && !models.some((model) => model?.id === compaction.model))
    problems.push(`compaction.model: no model ${JSON.stringify(compaction.model)} in models[]`)
  const threshold = typeof compaction?.threshold === 'number' ? compaction.threshold : 0.75
  // The defaults of src/runmgr/compaction.ts (not imported: the CLI reads this file without the run manager).
  const keep = typeof compaction?.keepRecent === 'number' ? compaction.keepRecent : 0.25
  if (keep >= threshold)
    problems.push('compaction.keepRecent: must be less than compaction.threshold (or every run would compact again)')
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
  if (typeof merged.trustProxy === 'string') {
    const bad = trustProxyProblem(merged.trustProxy)
    if (bad) problems.push(`trustProxy: ${bad}`)
  }
  const retention = merged.retention as { auditDays?: unknown } | undefined
  if (retention?.auditDays !== undefined && !merged.secretKey)
    problems.push(
      'retention.auditDays: needs secretKey (PLINTH_SECRET_KEY), which signs the checkpoint each deletion of audit entries leaves',
    )
  if (problems.length > 0) throw new ConfigError(problems)

  const file = merged as Partial<PlinthConfig>
  const config: PlinthConfig = {
    ...defaults,
    ...file,
    exec: { ...file.exec },
    uploads: { ...defaults.uploads, ...file.uploads },
    overload: { ...defaults.overload, ...file.overload },
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
  const problems = validateMcpServer(spec) ? [] : (validateMcpServer.errors ?? []).map((error) => describeError(error))
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

/**
 * What is wrong with a `trustProxy` string (`true`/`false`, or comma-separated addresses, CIDRs and
 * the names `loopback`, `linklocal`, `uniquelocal`), so it is refused with the rest, not at listen.
 */
function trustProxyProblem(value: string): string | undefined {
  if (value === 'true' || value === 'false') return undefined
  for (const entry of value.split(',').map((part) => part.trim())) {
    if (['loopback', 'linklocal', 'uniquelocal'].includes(entry)) continue
    const [address = '', prefix, extra] = entry.split('/')
    const family = isIP(address)
    // A prefix length, or (IPv4) a dotted netmask, as proxy-addr takes them.
    const prefixOk =
      prefix === undefined ||
      (/^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 6 ? 128 : 32)) ||
      (family === 4 && isIP(prefix) === 4)
    if (family === 0 || !prefixOk || extra !== undefined)
      return `${JSON.stringify(entry)} is not an address, a CIDR, loopback, linklocal or uniquelocal (or true/false)`
  }
  return undefined
}
