import { join } from 'node:path'
import type { Logger } from 'pino'
import {
  CommandBus,
  CommandCatalog,
  ProjectAccess,
  createPluginLogger,
  defaultResultMaxBytes,
  registerCliTools,
  registerCoreCommands,
  registerMemoryCommands,
  toolImageKeeper,
  registerExecCommands,
} from '../cmdbus/index.js'
import { CommandError, type McpServerSpec } from '../extension/index.js'
import { defaultExecSettings, ExecService, QuotaError, resolveOutputBytes, type ExecSettings } from '../exec/index.js'
import {
  createEmbedder,
  DocumentExtractor,
  Ingestor,
  Retriever,
  type DocumentExtractorOptions,
  type Embedder,
} from '../rag/index.js'
import { openMcpHub, type McpHub, type McpSandboxHost, type McpServerConfig } from '../mcp/index.js'
import { announceCatalogChanges } from './catalog-announcer.js'
import type { Store } from '../store/index.js'
import { ConfigError, mcpServerSpecProblems, type ExecConfig } from './config.js'
import { mcpServerSecrets, scrubAlso } from './logger.js'
import { createPluginHost } from './plugin-host.js'
import { loadPlugins, type LoadedPlugin, type RefusedPlugin } from './plugin-loader.js'
import { version } from './version.js'

export interface CommandBusSetup {
  bus: CommandBus
  access: ProjectAccess
  catalog: CommandCatalog
  plugins: LoadedPlugin[]
  /** Plugins left out at start, with the reason (see `strictPlugins`). */
  refusedPlugins: RefusedPlugin[]
  /** Shared-aware retrieval; asks the ProjectAuthz adapter the plugins registered. */
  retriever: Retriever
  /** Knowledge ingestion (not started: the caller starts and stops it). */
  ingestor: Ingestor
  /** Executions: backend choice, probe, work directories (stop it at shutdown). */
  exec: ExecService
  /** The mounted MCP servers (stop it at shutdown). */
  mcp: McpHub
}

/** Core commands, then the configured plugins, then the bus over them. */
export async function setUpCommandBus(
  store: Store,
  options: {
    plugins: readonly string[]
    logger: Logger
    actionTtlMs: number
    allowanceTtlMs: number
    exec?: ExecConfig
    /** Where work directories live (`<dataDir>/work`). */
    dataDir: string
    cwd?: string
    embedder?: Embedder
    /** How long `full` mode lasts (PLINTH_FULL_MODE_TTL). */
    fullModeTtlMs?: number
    /** Operator high-risk keywords for command strings (PLINTH_HIGH_RISK_KEYWORDS). */
    highRiskKeywords?: readonly string[]
    /** Largest command result in JSON bytes (PLINTH_RESULT_MAX_BYTES). */
    resultMaxBytes?: number
    /** How long a dead process's running dispatches wait before another instance ends them (PLINTH_RUN_LEASE). */
    dispatchLeaseMs?: number
    /** The document parser's limits (config `knowledge.extract`). */
    extract?: DocumentExtractorOptions
    /** Times an item's ingestion may start before it is failed (config `knowledge.maxAttempts`). */
    ingestMaxAttempts?: number
    /** The search relevance floor for vector-only hits (config `knowledge.minSimilarity`). */
    minSimilarity?: number
    /** MCP servers whose tools become commands (config `mcpServers`). */
    mcpServers?: readonly McpServerConfig[]
    /** Seals per-user MCP credentials (PLINTH_SECRET_KEY). */
    secretKey?: string
  },
): Promise<CommandBusSetup> {
  const resultMaxBytes = options.resultMaxBytes ?? defaultResultMaxBytes
  // An execution's output must fit a command result (docs/exec.md, "Bounds").
  const output = resolveOutputBytes(options.exec?.limits?.outputBytes, resultMaxBytes)
  if ('problem' in output) throw new ConfigError([output.problem])
  const execSettings: ExecSettings = {
    ...defaultExecSettings,
    ...options.exec,
    limits: { ...defaultExecSettings.limits, ...options.exec?.limits, outputBytes: output.outputBytes },
    quota: { ...defaultExecSettings.quota, ...options.exec?.quota },
  }
  const catalog = new CommandCatalog({ checkMcpServer: mcpServerSpecProblems })
  const access = new ProjectAccess(store, () => catalog.projectAuthz)
  const embedder = options.embedder ?? createEmbedder(undefined)
  // The adapter is looked up on every call: plugins register it after this point.
  const retriever = new Retriever({
    store,
    embedder,
    adapter: () => catalog.projectAuthz,
    ...(options.minSimilarity !== undefined && { minSimilarity: options.minSimilarity }),
    log: createPluginLogger(options.logger, 'rag'),
  })
  const ingestor = new Ingestor({
    store,
    embedder,
    log: createPluginLogger(options.logger, 'rag'),
    extractor: new DocumentExtractor(options.extract),
    // The embedded database keeps what it stores in memory that never shrinks: uploads wait on disk.
    ...(store.engine === 'pglite' && { uploadDir: join(options.dataDir, 'uploads') }),
    ...(options.ingestMaxAttempts !== undefined && { maxAttempts: options.ingestMaxAttempts }),
  })
  registerCoreCommands(catalog, {
    store,
    access,
    version,
    retriever,
    ...(options.fullModeTtlMs !== undefined && { fullModeTtlMs: options.fullModeTtlMs }),
  })
  registerMemoryCommands(catalog, { memories: retriever.memories, version })
  const exec = await ExecService.create({
    store,
    settings: execSettings,
    dataDir: options.dataDir,
    log: createPluginLogger(options.logger, 'exec'),
  })
  const execDeps = {
    store,
    exec,
    version,
    log: createPluginLogger(options.logger, 'exec'),
    highRiskKeywords: options.highRiskKeywords ?? [],
    resultMaxBytes,
  }
  registerExecCommands(catalog, execDeps)
  const { loaded: plugins, refused: refusedPlugins } = await loadPlugins(options.plugins, {
    catalog,
    cwd: options.cwd ?? process.cwd(),
    logger: options.logger,
    createHost: (plugin) =>
      createPluginHost(plugin, {
        store,
        logger: options.logger,
        options: { execBackend: exec.backendName, disableExecTools: execSettings.disableExecTools },
        access,
        retriever,
        ingestor,
      }),
  })
  // CLIs from the configuration, then those plugins declared; each is probed before it is offered.
  await registerCliTools(catalog, execDeps, [
    ...execSettings.cliTools.map((spec) => ({ plugin: 'config', pluginVersion: version, spec })),
    ...catalog.cliTools,
  ])
  // After the plugins: an MCP server cannot take a namespace a plugin has (all of them are under `mcp.`).
  const mcp = await openMcpHub({
    store,
    ...(options.secretKey && { secretKey: options.secretKey }),
    catalog,
    servers: withShippedServers(options.mcpServers ?? [], catalog.mcpServers, options.logger),
    log: (plugin) => createPluginLogger(options.logger, plugin),
    clientVersion: version,
    resultMaxBytes,
    sandbox: mcpSandboxHost(exec),
    keepImage: toolImageKeeper(exec.workdirs),
  })
  const bus = new CommandBus({
    store,
    catalog,
    access,
    logger: (plugin) => createPluginLogger(options.logger, plugin),
    actionTtlMs: options.actionTtlMs,
    allowanceTtlMs: options.allowanceTtlMs,
    highRiskKeywords: options.highRiskKeywords ?? [],
    maxResultBytes: resultMaxBytes,
    ...(options.dispatchLeaseMs !== undefined && { dispatchLeaseMs: options.dispatchLeaseMs }),
  })
  // Run-time catalog changes reach clients as `commands.changed` on the project and conversation streams.
  announceCatalogChanges(catalog, store, createPluginLogger(options.logger, 'catalog'))
  // A user who connects an account lets their calls waiting for it go on.
  mcp.onConnected = async (userId, server) => {
    await bus.approveConnected(userId, `mcp.${server}.`)
  }
  return { bus, access, catalog, plugins, refusedPlugins, retriever, ingestor, exec, mcp }
}

/**
 * The configured MCP servers, then those plugins ship (`Registry.addMcpServer`); a configured server of
 * the same name replaces the shipped one (docs/mcp.md, "Servers plugins ship").
 */
function withShippedServers(
  configured: readonly McpServerConfig[],
  shipped: ReadonlyArray<{ plugin: string; spec: McpServerSpec }>,
  logger: Logger,
): McpServerConfig[] {
  const servers = [...configured]
  for (const { plugin, spec } of shipped) {
    if (configured.some((server) => server.name === spec.name)) {
      createPluginLogger(logger, 'mcp').info('the configured MCP server replaces the one a plugin ships', {
        server: spec.name,
        plugin,
      })
      continue
    }
    servers.push(spec)
  }
  // Their credentials are scrubbed from the logs like the configured servers' (known only now).
  scrubAlso(logger, mcpServerSecrets(servers))
  return servers
}

/** What `sandbox: true` MCP servers need of the exec sandbox (docs/mcp.md, "Sandboxed stdio servers"). */
function mcpSandboxHost(exec: ExecService): McpSandboxHost {
  const quota = async (check: () => Promise<void>): Promise<void> => {
    try {
      await check()
    } catch (error) {
      if (error instanceof QuotaError) throw new CommandError('quota_exceeded', error.message)
      throw error
    }
  }
  return {
    unavailable: () => exec.sandboxUnavailable,
    launch: (input) => exec.launchSandboxed(input),
    beforeCall: async (conversationId, ownerId) => {
      await quota(() => exec.quota.ensureRoom(conversationId, ownerId))
      await exec.workdirs.beforeExec(conversationId)
    },
    afterCall: async (conversationId, ownerId, startedAt) => {
      try {
        await quota(() => exec.quota.settleAfterExec(conversationId, ownerId, startedAt))
      } finally {
        await exec.workdirs.afterExec(conversationId, startedAt)
      }
    },
  }
}
