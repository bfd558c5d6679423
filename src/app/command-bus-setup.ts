import type { Logger } from 'pino'
import { CommandBus, CommandCatalog, ProjectAccess, createPluginLogger, registerCoreCommands } from '../cmdbus/index.js'
import type { Options } from '../extension/index.js'
import type { Store } from '../store/index.js'
import { createPluginHost } from './plugin-host.js'
import { loadPlugins, type LoadedPlugin } from './plugin-loader.js'
import { version } from './version.js'

export interface CommandBusSetup {
  bus: CommandBus
  access: ProjectAccess
  catalog: CommandCatalog
  plugins: LoadedPlugin[]
}

/** Core commands, then the configured plugins, then the bus over them. */
export async function setUpCommandBus(
  store: Store,
  options: { plugins: readonly string[]; logger: Logger; actionTtlMs: number; allowanceTtlMs: number; exec: Options; cwd?: string },
): Promise<CommandBusSetup> {
  const catalog = new CommandCatalog()
  const access = new ProjectAccess(store, () => catalog.projectAuthz)
  registerCoreCommands(catalog, { store, access, version })
  const plugins = await loadPlugins(options.plugins, {
    catalog,
    cwd: options.cwd ?? process.cwd(),
    logger: options.logger,
    createHost: (plugin) => createPluginHost(plugin, { store, logger: options.logger, options: options.exec }),
  })
  const bus = new CommandBus({
    store,
    catalog,
    access,
    logger: (plugin) => createPluginLogger(options.logger, plugin),
    actionTtlMs: options.actionTtlMs,
    allowanceTtlMs: options.allowanceTtlMs,
  })
  return { bus, access, catalog, plugins }
}
