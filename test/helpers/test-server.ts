import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pino, type Logger } from 'pino'
import type { ExecService, ExecSettings } from '../../src/exec/index.js'
import { Registry } from 'prom-client'
import { createAgentMetrics, setUpCommandBus, setUpRuns } from '../../src/app/index.js'
import type { FallbackSettings, LanguageModel, ModelPricing, ModelSettings } from '../../src/llm/index.js'
import {
  HashingEmbedder,
  prepareEmbeddings,
  type DocumentExtractorOptions,
  type Embedder,
  type Ingestor,
  type Retriever,
} from '../../src/rag/index.js'
import type { McpServerConfig } from '../../src/mcp/index.js'
import type { CompactionSettings, RetentionSettings, RunManager, RunQuota } from '../../src/runmgr/index.js'
import { buildServer, type App, type ServerOptions } from '../../src/server/index.js'
import { createToken, createUser, revokeToken, type RunBudget, type Store, type User } from '../../src/store/index.js'
import { defaultWebhookSettings, WebhookDeliverer, type WebhookSettings } from '../../src/webhooks/index.js'
import { assertLedgerInvariant } from './ledger.js'

export interface TestUser {
  user: User
  token: string
  tokenId: string
}

export interface Answer {
  status: number
  headers: Headers
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary JSON
  body: any
}

export interface TestServer {
  app: App
  runs: RunManager
  exec: ExecService
  dataDir: string
  retriever: Retriever
  ingestor: Ingestor
  store: Store
  url: string
  /** The webhook deliverer, when `webhookDelivery` was given. */
  webhooks?: WebhookDeliverer
  createUser(name?: string): Promise<TestUser>
  revoke(user: TestUser): Promise<void>
  /** A real HTTP request to the listening server; JSON in, JSON (or text) out. */
  request(
    method: string,
    path: string,
    options?: { token?: string; body?: unknown; rawBody?: string; headers?: Record<string, string> },
  ): Promise<Answer>
  close(): Promise<void>
}

let userCounter = 0

/** Builds the app on `store` and listens on a free loopback port. */
export async function startTestServer(
  store: Store,
  overrides: Partial<Omit<ServerOptions, 'logger' | 'exec'>> & {
    logger?: Logger
    embedder?: Embedder
    exec?: Partial<ExecSettings>
    dataDir?: string
    plugins?: string[]
    actionTtlMs?: number
    allowanceTtlMs?: number
    models?: LanguageModel[] | ModelSettings[]
    /** Prices of prebuilt models, by id. */
    prices?: ReadonlyMap<string, ModelPricing>
    /** The server's default run budget. */
    runBudget?: RunBudget
    toolOutputLimit?: number
    llmMaxOutputChars?: number
    llmMaxToolCalls?: number
    llmConcurrency?: number
    llmConcurrencyPerUser?: number
    maxActiveRunsPerUser?: number
    runQuota?: RunQuota
    retention?: RetentionSettings
    /** Context compaction (default: on, with the default settings). */
    compaction?: Partial<CompactionSettings>
    leaseMs?: number
    highRiskKeywords?: string[]
    resultMaxBytes?: number
    extract?: DocumentExtractorOptions
    ingestMaxAttempts?: number
    mcpServers?: McpServerConfig[]
    secretKey?: string
    webhookDelivery?: Partial<WebhookSettings>
    /** Fallbacks and retries of the models (by id). */
    fallbacks?: FallbackSettings
  } = {},
): Promise<TestServer> {
  const {
    fallbacks,
    webhookDelivery,
    mcpServers = [],
    secretKey,
    plugins = [],
    actionTtlMs = 3_600_000,
    allowanceTtlMs = 3_600_000,
    models = [],
    prices,
    runBudget,
    toolOutputLimit,
    llmMaxOutputChars,
    llmMaxToolCalls,
    llmConcurrency,
    llmConcurrencyPerUser,
    maxActiveRunsPerUser,
    runQuota,
    retention,
    compaction,
    leaseMs,
    highRiskKeywords,
    resultMaxBytes,
    extract,
    ingestMaxAttempts,
    embedder = new HashingEmbedder(),
    exec: execOverrides = {},
    ...serverOverrides
  } = overrides
  // Work directories live here; removed when the server closes (unless the test chose the directory).
  const ownDataDir = overrides.dataDir === undefined
  const dataDir = overrides.dataDir ?? (await mkdtemp(join(tmpdir(), 'plinth-test-data-')))
  // The sandbox user must reach the work directories below it (mkdtemp makes it 0700).
  if (ownDataDir) await chmod(dataDir, 0o711)
  const exec = { ...execOverrides }
  const logger = serverOverrides.logger ?? pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' })
  await prepareEmbeddings(store, embedder)
  const {
    bus,
    access,
    retriever,
    ingestor,
    exec: execService,
    mcp,
  } = await setUpCommandBus(store, {
    mcpServers,
    ...(secretKey && { secretKey }),
    plugins,
    logger,
    actionTtlMs,
    allowanceTtlMs,
    exec,
    dataDir,
    embedder,
    ...(serverOverrides.fullModeTtlMs !== undefined && { fullModeTtlMs: serverOverrides.fullModeTtlMs }),
    ...(highRiskKeywords && { highRiskKeywords }),
    ...(resultMaxBytes !== undefined && { resultMaxBytes }),
    ...(extract && { extract }),
    ...(ingestMaxAttempts !== undefined && { ingestMaxAttempts }),
  })
  await ingestor.start()
  const metrics = new Registry()
  const runs = await setUpRuns(store, bus, {
    models,
    ...(prices && { prices }),
    ...(fallbacks && { fallbacks }),
    ...(runBudget && { runBudget }),
    logger,
    actionTtlMs,
    observer: createAgentMetrics(metrics, bus),
    retriever,
    ...(toolOutputLimit !== undefined && { toolOutputLimit }),
    ...(llmMaxOutputChars !== undefined && { llmMaxOutputChars }),
    ...(llmMaxToolCalls !== undefined && { llmMaxToolCalls }),
    ...(llmConcurrency !== undefined && { llmConcurrency }),
    ...(llmConcurrencyPerUser !== undefined && { llmConcurrencyPerUser }),
    ...(maxActiveRunsPerUser !== undefined && { maxActiveRunsPerUser }),
    ...(runQuota && { runQuota }),
    ...(retention && { retention }),
    ...(compaction && { compaction }),
    ...(secretKey && { auditKey: secretKey }),
    discardWorkDir: (conversationId) => execService.workdirs.discard(conversationId),
    readFile: async (conversationId, path) =>
      (await execService.workdirs.read(conversationId, path, { limit: 8 * 1024 * 1024 })).bytes,
    ...(leaseMs !== undefined && { leaseMs }),
  })
  // Webhook delivery runs only when a test asks for it (with its settings); the routes are always there.
  const webhookSettings = webhookDelivery && { ...defaultWebhookSettings, ...webhookDelivery }
  const webhooks =
    webhookSettings &&
    new WebhookDeliverer(store, webhookSettings, { exclusive: store.engine === 'pglite', pollMs: 200 })
  await webhooks?.start()
  const app = await buildServer({
    store,
    bus,
    access,
    runs,
    retriever,
    ingestor,
    exec: execService,
    logger,
    bodyLimit: 64 * 1024,
    rateLimit: { max: 100_000, windowMs: 60_000, addressMax: 1_000_000, authFailureMax: 100_000 },
    host: '127.0.0.1',
    maxConnectionsPerAddress: 10_000,
    sseHeartbeatMs: 15_000,
    fullModeTtlMs: 3_600_000,
    version: 'test',
    // The tests share this process's event loop with the server: shedding only where a test asks for it.
    overload: { maxEventLoopDelayMs: 0, maxDatabaseWaitMs: 0, maxAdmitMs: 0, maxActiveRuns: 0, adaptiveCapSeconds: 0 },
    metrics,
    liveWarnings: () => mcp.warnings(),
    mcp,
    ...(secretKey && { auditKey: secretKey }),
    ...(webhookSettings && {
      webhooks: {
        allowPrivate: webhookSettings.allowPrivate,
        secretGraceMs: webhookSettings.secretGraceMs,
        wake: () => webhooks?.poke(),
      },
    }),
    ...serverOverrides,
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`
  return {
    app,
    runs,
    exec: execService,
    dataDir,
    retriever,
    ingestor,
    store,
    url,
    ...(webhooks && { webhooks }),
    async createUser(name) {
      const created = await createUser(store, name ?? `user${process.pid}_${userCounter++}_${Date.now()}`)
      if ('error' in created) throw new Error('name taken')
      const token = await createToken(store, created.id, 'test')
      return { user: created, token: token.token, tokenId: token.id }
    },
    async revoke(user) {
      await revokeToken(store, user.tokenId)
      // As the admin route does: this instance's token cache forgets it at once (others hear the notification).
      store.access.deliver(`token:${user.tokenId}`)
    },
    async request(method, path, options = {}) {
      const headers: Record<string, string> = { ...options.headers }
      if (options.token) headers.authorization = `Bearer ${options.token}`
      let body: string | undefined
      if (options.rawBody !== undefined) body = options.rawBody
      else if (options.body !== undefined) body = JSON.stringify(options.body)
      if (body !== undefined && !Object.keys(headers).some((name) => name.toLowerCase() === 'content-type'))
        headers['content-type'] = 'application/json'
      const response = await fetch(url + path, { method, headers, body })
      const text = await response.text()
      let parsed: unknown = text
      if (/json/.test(response.headers.get('content-type') ?? '') && text) parsed = JSON.parse(text)
      return { status: response.status, headers: response.headers, body: parsed }
    },
    close: async () => {
      await runs.stop()
      await webhooks?.stop()
      await app.close()
      await ingestor.stop()
      await execService.stop()
      await mcp.stop()
      if (ownDataDir) await rm(dataDir, { recursive: true, force: true })
      // Every test's transcript is held to the ledger invariant, whatever the test itself checks.
      await assertLedgerInvariant(store)
    },
  }
}
