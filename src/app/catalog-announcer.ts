import type { CommandCatalog } from '../cmdbus/index.js'
import type { PluginLogger } from '../extension/index.js'
import { appendCatalogChange, type Store } from '../store/index.js'

/**
 * Puts each run-time change of the catalog (an MCP server's tools mounted, replaced or taken down) on
 * the event log as `commands.changed`, so clients following a project or conversation stream re-read
 * `GET /api/commands` (docs/mcp.md, "The catalog's stream event"). Changes of one plugin are written in
 * the order they happened. Returns a function that stops announcing and waits for what is under way.
 */
export function announceCatalogChanges(catalog: CommandCatalog, store: Store, log: PluginLogger): () => Promise<void> {
  const chains = new Map<string, Promise<void>>()
  const stop = catalog.onChange((plugin) => {
    const previous = chains.get(plugin) ?? Promise.resolve()
    const next = previous.then(async () => {
      // The plugin's commands as they are when this write runs: a burst of changes ends in one event.
      const ids = catalog
        .list()
        .filter((command) => command.plugin === plugin)
        .map((command) => command.spec.id)
      try {
        await appendCatalogChange(store, plugin, ids)
      } catch (error) {
        log.warn('the catalog change could not be put on the event log', { plugin, err: error })
      }
    })
    chains.set(plugin, next)
    void next.finally(() => {
      if (chains.get(plugin) === next) chains.delete(plugin)
    })
  })
  return async () => {
    stop()
    await Promise.allSettled([...chains.values()])
  }
}
