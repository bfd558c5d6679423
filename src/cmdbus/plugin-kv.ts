import type { JsonValue, KvStore, LogMethod, PluginLogger } from '../extension/index.js'
import { kvDelete, kvGet, kvList, kvSet, kvUpdate, type Store } from '../store/index.js'

/** A plugin's namespaced key-value store over `plugin_kv`. */
export function createPluginKv(store: Store, plugin: string): KvStore {
  return {
    get: async <T extends JsonValue = JsonValue>(key: string) => (await kvGet(store, plugin, key)) as T | undefined,
    set: (key, value) => kvSet(store, plugin, key, value),
    delete: (key) => kvDelete(store, plugin, key),
    list: (prefix) => kvList(store, plugin, prefix),
    update: (key, change) =>
      kvUpdate(store, plugin, key, change as (current: JsonValue | undefined) => JsonValue | undefined),
  }
}

interface PinoLike {
  child(bindings: Record<string, unknown>): PinoLike
  debug(object: Record<string, unknown>, message: string): void
  info(object: Record<string, unknown>, message: string): void
  warn(object: Record<string, unknown>, message: string): void
  error(object: Record<string, unknown>, message: string): void
}

/** A plugin's logger: pino underneath, `plugin` on every line; either argument order (see LogMethod). */
export function createPluginLogger(logger: PinoLike, plugin: string): PluginLogger {
  const child = logger.child({ plugin })
  const at =
    (level: 'debug' | 'info' | 'warn' | 'error'): LogMethod =>
    (first: string | Record<string, unknown>, second?: string | Record<string, unknown>) => {
      const [fields, message] = typeof first === 'string' ? [second, first] : [first, second]
      child[level](
        typeof fields === 'object' && fields !== null ? fields : {},
        typeof message === 'string' ? message : '',
      )
    }
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }
}
