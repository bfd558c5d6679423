import type { Logger } from 'pino'
import { CommandBus, CommandCatalog, ProjectAccess, createPluginLogger, registerCoreCommands } from '../cmdbus/index.js'
import type { Options } from '../extension/index.js'
import { createEmbedder, Ingestor, Retriever, type Embedder } from '../rag/index.js'
import type { Store } from '../store/index.js'
import { createPluginHost } from './plugin-host.js'
import { loadPlugins, type LoadedPlugin } from './plugin-loader.js'
import { version } from './version.js'

export interface CommandBusSetup {
  bus: CommandBus
  access: ProjectAccess
  catalog: CommandCatalog
  plugins: LoadedPlugin[]
  /** Shared-aware retrieval; asks the ProjectAuthz adapter the plugins registered. */
  retriever: Retriever
  /** Knowledge ingestion (not started: the caller starts and stops it). */
  ingestor: Ingestor
}

/** Core commands, then the configured plugins, then the bus over them. */
export async function setUpCommandBus(
  store: Store,
  options: { plugins: readonly string[]; logger: Logger; actionTtlMs: number; allowanceTtlMs: number; exec: Options; cwd?: string; embedder?: Embedder },
): Promise<CommandBusSetup> {
  const catalog = new CommandCatalog()
  const access = new ProjectAccess(store, () => catalog.projectAuthz)
  const embedder = options.embedder ?? createEmbedder(undefined)
  // The adapter is looked up on every call: plugins register it after this point.
  const retriever = new Retriever({ store, embedder, adapter: () => catalog.projectAuthz })
  const ingestor = new Ingestor({ store, embedder, log: createPluginLogger(options.logger, 'rag') })
  registerCoreCommands(catalog, { store, access, version, retriever })
  const plugins = await loadPlugins(options.plugins, {
    catalog,
    cwd: options.cwd ?? process.cwd(),
    logger: options.logger,
    createHost: (plugin) => createPluginHost(plugin, { store, logger: options.logger, options: options.exec, access, retriever, ingestor }),
  })
  const bus = new CommandBus({
    store,
    catalog,
    access,
    logger: (plugin) => createPluginLogger(options.logger, plugin),
    actionTtlMs: options.actionTtlMs,
    allowanceTtlMs: options.allowanceTtlMs,
  })
  return { bus, access, catalog, plugins, retriever, ingestor }
}
