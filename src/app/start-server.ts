import type { Logger } from 'pino'
import { buildServer, type App } from '../server/index.js'
import { activeUserIds, modelsNamedButMissing, openStore, type Store } from '../store/index.js'
import type { ExecService } from '../exec/index.js'
import type { McpHub } from '../mcp/index.js'
import { createEmbedder, prepareEmbeddings, vectorIndexWarning, type Ingestor } from '../rag/index.js'
import { Registry } from 'prom-client'
import type { RunManager } from '../runmgr/index.js'
import { defaultWebhookSettings, WebhookDeliverer } from '../webhooks/index.js'
import { createAgentMetrics } from './agent-metrics.js'
import { setUpCommandBus } from './command-bus-setup.js'
import { setUpRuns } from './run-setup.js'
import { modelsMissingKeys } from '../llm/index.js'
import type { PlinthConfig } from './config.js'
import { fastifyListeningText, scrubberOf } from './logger.js'
import { version } from './version.js'
import { chooseWasmCompiler } from './wasm-compiler.js'
import { otelSettings, startOtel, type Otel } from '../telemetry/index.js'

export interface RunningServer {
  app: App
  store: Store
  /** `http://host:port` the server listens on. */
  url: string
  /** Stops accepting, ends streams with a final event, closes the database. */
  close(): Promise<void>
  /** What went wrong at start without stopping it (refused plugins, models without keys); also on /readyz. */
  warnings: string[]
}

/** Opens the store (migrating it), builds the HTTP app and listens. */
export async function startServer(config: PlinthConfig, logger: Logger): Promise<RunningServer> {
  for (const deprecation of config.deprecations ?? []) logger.warn(deprecation)
  // Traces and GenAI metrics, when the standard OTEL_* variables ask for them (docs/guides/operating.md#tracing).
  const otel = await startTelemetry(logger)
  if (!config.databaseUrl) chooseWasmCompiler(config.pgliteCompiler)
  const store = await openStore({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    pgliteSharedBuffers: config.pgliteSharedBuffers,
    prepareStatements: config.pgPrepare,
    synchronousCommit: config.pgSynchronousCommit,
    // A restart right after a stop: the old process may still be closing the embedded database.
    lockWait: {
      ms: config.dataDirLockWaitMs,
      onWait: (holder) =>
        logger.warn(
          { holder },
          `the embedded database is held by process ${holder} (another server, or one still stopping); waiting up to ${Math.round(config.dataDirLockWaitMs / 1000)} s for it`,
        ),
    },
  })
  let app: App
  let runs: RunManager | undefined
  let ingestor: Ingestor | undefined
  let execService: ExecService | undefined
  let mcp: McpHub | undefined
  let webhooks: WebhookDeliverer | undefined
  const webhookSettings = { ...defaultWebhookSettings, ...config.webhooks }
  const warnings: string[] = []
  try {
    const embedder = createEmbedder(config.embeddings)
    // Refuses to start when stored knowledge was embedded by another embedder (names the fix).
    await prepareEmbeddings(store, embedder)
    const setup = await setUpCommandBus(store, {
      plugins: config.plugins,
      logger,
      actionTtlMs: config.actionTtlMs,
      allowanceTtlMs: config.allowanceTtlMs,
      exec: config.exec,
      dataDir: config.dataDir,
      embedder,
      fullModeTtlMs: config.fullModeTtlMs,
      highRiskKeywords: config.highRiskKeywords,
      resultMaxBytes: config.resultMaxBytes,
      // A dispatch's executor lease is the run lease: one setting says when a silent process counts as dead.
      dispatchLeaseMs: config.runLeaseMs,
      ...(config.knowledge.extract && { extract: config.knowledge.extract }),
      ...(config.knowledge.maxAttempts !== undefined && { ingestMaxAttempts: config.knowledge.maxAttempts }),
      ...(config.knowledge.minSimilarity !== undefined && { minSimilarity: config.knowledge.minSimilarity }),
      mcpServers: config.mcpServers,
      ...(config.secretKey && { secretKey: config.secretKey }),
    })
    const { bus, access, retriever } = setup
    execService = setup.exec
    mcp = setup.mcp
    warnings.push(...setup.refusedPlugins.map((plugin) => `plugin ${plugin.specifier} refused: ${plugin.reason}`))
    if (config.strictPlugins && warnings.length > 0)
      throw new Error(
        `${warnings.join('; ')} (strict plugins: fix or remove it, or turn strict plugins off: --strict-plugins, PLINTH_STRICT_PLUGINS or strictPlugins)`,
      )
    const directWarning = await setup.exec.directWarning()
    if (directWarning) {
      warnings.push(directWarning)
      logger.warn(directWarning)
    }
    const approversWarning = await unknownApproversWarning(store, setup.exec)
    if (approversWarning) {
      warnings.push(approversWarning)
      logger.warn(approversWarning)
    }
    for (const missing of modelsMissingKeys(config.models, process.env))
      warnings.push(`model ${missing.id}: ${missing.apiKeyEnv} is not set; its runs fail with upstream_auth_missing`)
    const indexWarning = await vectorIndexWarning(store)
    if (indexWarning) {
      warnings.push(indexWarning)
      logger.warn(indexWarning)
    }
    ingestor = setup.ingestor
    await ingestor.start()
    const metrics = new Registry()
    runs = await setUpRuns(store, bus, {
      observer: createAgentMetrics(metrics, bus),
      models: config.models,
      defaultModel: config.defaultModel,
      logger,
      actionTtlMs: config.actionTtlMs,
      toolOutputLimit: config.toolOutputLimit,
      llmIdleTimeoutMs: config.llmIdleTimeoutMs,
      llmCallTimeoutMs: config.llmCallTimeoutMs,
      llmMaxAnswerBytes: config.llmMaxAnswerBytes,
      llmMaxOutputChars: config.llmMaxOutputChars,
      llmMaxToolCalls: config.llmMaxToolCalls,
      llmConcurrency: config.llmConcurrency,
      ...(config.llmConcurrencyPerUser !== undefined && { llmConcurrencyPerUser: config.llmConcurrencyPerUser }),
      maxActiveRunsPerUser: config.maxActiveRunsPerUser,
      runQuota: config.runQuota,
      leaseMs: config.runLeaseMs,
      maxResumes: config.runMaxResumes,
      shutdownGraceMs: config.shutdownGraceMs,
      retriever,
      runBudget: config.runBudget,
      retention: config.retention,
      compaction: config.compaction,
      ...(config.secretKey && { auditKey: config.secretKey }),
      discardWorkDir: (conversationId) => setup.exec.workdirs.discard(conversationId),
      evictWorkCaches: () => setup.exec.workdirs.evictPurged(),
      readFile: async (conversationId, path) =>
        (await setup.exec.workdirs.read(conversationId, path, { limit: 8 * 1024 * 1024 })).bytes,
    })
    // Removing a model that projects or unfinished runs still name is said, not silent (docs/guides/agent-runs.md, "Models").
    for (const missing of await modelsNamedButMissing(
      store,
      runs.models.list().map((model) => model.id),
    )) {
      const warning =
        `model ${missing.model} is not configured but ${[missing.projects > 0 && `${missing.projects} project${missing.projects === 1 ? '' : 's'} (defaultModel)`, missing.runs > 0 && `${missing.runs} unfinished run${missing.runs === 1 ? '' : 's'}`].filter(Boolean).join(' and ')} name it: ` +
        'those projects fall back to the default model; those runs fail unknown_model and can be resumed once it is configured again'
      warnings.push(warning)
      logger.warn(warning)
    }
    // Webhook deliveries, in every instance: the outbox is shared, each attempt leased (docs/webhooks.md).
    webhooks = new WebhookDeliverer(store, webhookSettings, { log: logger, exclusive: store.engine === 'pglite' })
    await webhooks.start()
    const deliverer = webhooks
    app = await buildServer({
      store,
      bus,
      access,
      runs,
      retriever,
      ingestor,
      exec: setup.exec,
      startWarnings: warnings,
      liveWarnings: () => setup.mcp.warnings(),
      mcp: setup.mcp,
      mcpAuthorizationServers: config.mcpAuthorizationServers,
      maxKnowledgeFileBytes: config.knowledge.maxFileBytes,
      logger,
      bodyLimit: config.bodyLimit,
      rateLimit: config.rateLimit,
      requestTimeoutMs: config.requestTimeoutMs,
      connectionTimeoutMs: config.connectionTimeoutMs,
      maxConnectionsPerAddress: config.maxConnectionsPerAddress,
      maxConnections: config.maxConnections,
      uploads: config.uploads,
      overload: config.overload,
      maxKnowledgeBytesPerUser: config.knowledge.maxBytesPerUser,
      ...(config.trustProxy !== undefined && { trustProxy: config.trustProxy }),
      host: config.host,
      ...(config.metricsToken && { metricsToken: config.metricsToken }),
      corsOrigins: config.corsOrigins,
      sseHeartbeatMs: config.sseHeartbeatMs,
      schedules: config.schedules,
      streams: config.streams,
      fullModeTtlMs: config.fullModeTtlMs,
      currency: config.currency,
      adminToken: config.adminToken,
      ...(config.secretKey && { auditKey: config.secretKey }),
      version,
      metrics,
      ...(otel?.fastifyPlugin && { httpTracing: otel.fastifyPlugin }),
      webhooks: {
        allowPrivate: webhookSettings.allowPrivate,
        secretGraceMs: webhookSettings.secretGraceMs,
        wake: () => deliverer.poke(),
      },
    })
    await app.listen({ port: config.port, host: config.host, listenTextResolver: () => fastifyListeningText })
  } catch (error) {
    await webhooks?.stop()
    await runs?.stop()
    await ingestor?.stop()
    await execService?.stop()
    await mcp?.stop()
    await store.close()
    await otel?.shutdown()
    throw error
  }
  const runManager = runs
  const knowledgeIngestor = ingestor
  const exec = execService
  const mcpHub = mcp
  const webhookDeliverer = webhooks
  const address = app.server.address()
  const port = typeof address === 'object' && address ? address.port : config.port
  const host = config.host.includes(':') ? `[${config.host}]` : config.host
  logger.info(
    { engine: store.engine, migrationsApplied: store.migrations.applied, adminApi: Boolean(config.adminToken) },
    `plinth ${version} listening on http://${host}:${port}`,
  )
  let closing: Promise<void> | null = null
  return {
    app,
    warnings,
    store,
    url: `http://${host}:${port}`,
    close: () => {
      closing ??= (async () => {
        await runManager.stop()
        await webhookDeliverer?.stop()
        await app.close()
        await knowledgeIngestor.stop()
        await exec.stop()
        await mcpHub?.stop()
        await store.close()
        await otel?.shutdown()
      })()
      return closing
    },
  }
}

/** Starts OpenTelemetry when configured; what it cannot use is said, and never stops the server. */
async function startTelemetry(logger: Logger): Promise<Otel | undefined> {
  const settings = otelSettings()
  for (const warning of settings.warnings) logger.warn(warning)
  if (!settings.traces && !settings.metrics) return undefined
  const otel = await startOtel(settings, {
    serviceVersion: version,
    warn: (message) => logger.warn(message),
    scrub: scrubberOf(logger),
  })
  logger.info(
    { traces: settings.traces, metrics: settings.metrics, protocol: settings.protocol },
    'OpenTelemetry export is on',
  )
  return otel
}

/**
 * Designated approvers of `direct` executions who name no active user: their decisions could be
 * approved by nobody (a typo, a disabled user, or a name migration 0041 gave its id to).
 */
async function unknownApproversWarning(store: Store, exec: ExecService): Promise<string | undefined> {
  if (exec.backendName !== 'direct') return undefined
  const unknown: string[] = []
  for (const name of exec.settings.directApprovers)
    if ((await activeUserIds(store, [name])).length === 0) unknown.push(JSON.stringify(name))
  if (unknown.length === 0) return undefined
  return `exec.directApprovers names no active user: ${unknown.join(', ')} (a user name or id; plinth users list shows them, with the id a name clash gave a name in an upgrade)`
}
