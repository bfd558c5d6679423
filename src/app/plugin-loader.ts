import { existsSync, statSync } from 'node:fs'
import { isAbsolute, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { Logger } from 'pino'
import semver from 'semver'
import type { CommandCatalog } from '../cmdbus/index.js'
import { SurfaceVersion, type Host, type PluginDefinition } from '../extension/index.js'

export interface LoadedPlugin {
  name: string
  version: string
  commands: string[]
}

const setupTimeoutMs = 10_000

/**
 * Loads plugins in order (SPEC §10): a bundled one by bare name (`rdm`), a path (`./my-plugin`), or a
 * package name. A plugin that fails to import, declares an incompatible `surface`, throws in setup
 * or registers anything invalid is refused as a whole with one clear log line; the others load.
 */
export async function loadPlugins(
  specifiers: readonly string[],
  options: { catalog: CommandCatalog; createHost: (plugin: string) => Host; logger: Logger; cwd: string },
): Promise<LoadedPlugin[]> {
  const loaded: LoadedPlugin[] = []
  for (const specifier of specifiers) {
    try {
      const definition = await importPlugin(specifier, options.cwd)
      if (!semver.validRange(definition.surface) || !semver.satisfies(SurfaceVersion, definition.surface)) {
        throw new Error(`it needs extension surface ${JSON.stringify(definition.surface)} but this server provides ${SurfaceVersion}`)
      }
      if (loaded.some((plugin) => plugin.name === definition.name)) throw new Error(`a plugin named ${definition.name} is already loaded`)
      const staged = options.catalog.stage(definition.name, definition.version)
      const before = new Set(options.catalog.list().map((command) => command.spec.id))
      await withTimeout(Promise.resolve(definition.setup(staged.registry, options.createHost(definition.name))), setupTimeoutMs, 'setup did not finish in time')
      staged.commit()
      const commands = options.catalog.list().map((command) => command.spec.id).filter((id) => !before.has(id))
      loaded.push({ name: definition.name, version: definition.version, commands })
      options.logger.info({ plugin: definition.name, version: definition.version, commands }, `plugin ${definition.name} ${definition.version} loaded`)
    } catch (error) {
      options.logger.error({ plugin: specifier, reason: (error as Error).message }, `plugin ${specifier} refused: ${(error as Error).message}`)
    }
  }
  return loaded
}

async function importPlugin(specifier: string, cwd: string): Promise<PluginDefinition> {
  const module = (await import(resolveSpecifier(specifier, cwd))) as { default?: unknown; plugin?: unknown }
  const definition = (module.default ?? module.plugin) as Partial<PluginDefinition> | undefined
  if (
    !definition ||
    typeof definition.name !== 'string' ||
    typeof definition.version !== 'string' ||
    typeof definition.surface !== 'string' ||
    typeof definition.setup !== 'function'
  ) {
    throw new Error('its module does not export definePlugin({ name, version, surface, setup }) as default')
  }
  return definition as PluginDefinition
}

/** Bare names of bundled plugins, paths, then packages. */
function resolveSpecifier(specifier: string, cwd: string): string {
  if (/^[a-z][a-z0-9_-]*$/.test(specifier)) {
    const bundled = bundledPlugin(specifier)
    if (bundled) return pathToFileURL(bundled).href
  }
  if (specifier.startsWith('.') || isAbsolute(specifier)) {
    const path = isAbsolute(specifier) ? specifier : resolve(cwd, specifier)
    if (existsSync(path) && statSync(path).isDirectory()) {
      for (const index of ['index.js', 'index.mjs', 'index.ts']) if (existsSync(join(path, index))) return pathToFileURL(join(path, index)).href
    }
    return pathToFileURL(path).href
  }
  return specifier
}

function bundledPlugin(name: string): string | undefined {
  // src/app → ../../plugins; dist/src/app → ../../plugins (compiled alongside).
  const pluginsDir = fileURLToPath(new URL('../../plugins/', import.meta.url))
  for (const index of ['index.js', 'index.ts']) {
    const path = join(pluginsDir, name, index)
    if (existsSync(path)) return path
  }
  return undefined
}

async function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  try {
    return await Promise.race([promise, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(message)), ms)))])
  } finally {
    clearTimeout(timer)
  }
}
