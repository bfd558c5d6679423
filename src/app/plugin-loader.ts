import { existsSync, readFileSync, statSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, isAbsolute, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { Logger } from 'pino'
import semver from 'semver'
import type { CommandCatalog } from '../cmdbus/index.js'
import { SurfaceVersion, type Host, type PluginDefinition } from '../extension/index.js'
import { resolveExtensionToSelf } from './extension-resolution.js'

export interface LoadedPlugin {
  name: string
  version: string
  commands: string[]
}

/** A plugin that was left out, and why. */
export interface RefusedPlugin {
  specifier: string
  reason: string
}

export interface PluginLoadResult {
  loaded: LoadedPlugin[]
  refused: RefusedPlugin[]
}

const setupTimeoutMs = 10_000

/**
 * Loads plugins in order (docs/guides/writing-a-plugin.md): a bundled one by bare name (`rdm`), a path
 * (`./my-plugin.js`, `./my-plugin.ts`, a folder), or an installed package (resolved from `cwd`).
 * Wherever a plugin lives, `plinth/extension` is this server's own surface. A plugin that fails to
 * import, declares an incompatible `surface`, throws in setup or registers anything invalid is refused
 * as a whole with one clear log line; the others load.
 */
export async function loadPlugins(
  specifiers: readonly string[],
  options: { catalog: CommandCatalog; createHost: (plugin: string) => Host; logger: Logger; cwd: string },
): Promise<PluginLoadResult> {
  const loaded: LoadedPlugin[] = []
  const refused: RefusedPlugin[] = []
  // Namespace → the plugin that has it.
  const owners = new Map<string, string>()
  if (specifiers.length > 0) resolveExtensionToSelf()
  for (const specifier of specifiers) {
    try {
      const definition = await importPlugin(specifier, options.cwd)
      if (!semver.validRange(definition.surface) || !semver.satisfies(SurfaceVersion, definition.surface)) {
        throw new Error(
          `it needs extension surface ${JSON.stringify(definition.surface)} but this server provides ${SurfaceVersion}`,
        )
      }
      if (loaded.some((plugin) => plugin.name === definition.name))
        throw new Error(`a plugin named ${definition.name} is already loaded`)
      const namespaces = claimNamespaces(definition, owners, options.catalog)
      const staged = options.catalog.stage(definition.name, definition.version, { namespaces })
      const before = new Set(options.catalog.list().map((command) => command.spec.id))
      await withTimeout(
        Promise.resolve(definition.setup(staged.registry, options.createHost(definition.name))),
        setupTimeoutMs,
        'setup did not finish in time',
      )
      staged.commit()
      const commands = options.catalog
        .list()
        .map((command) => command.spec.id)
        .filter((id) => !before.has(id))
      for (const namespace of namespaces) owners.set(namespace, definition.name)
      loaded.push({ name: definition.name, version: definition.version, commands })
      options.logger.info(
        { plugin: definition.name, version: definition.version, commands },
        `plugin ${definition.name} ${definition.version} loaded`,
      )
    } catch (error) {
      const reason = (error as Error).message
      refused.push({ specifier, reason })
      options.logger.error({ plugin: specifier, err: error }, `plugin ${specifier} refused: ${reason}`)
    }
  }
  return { loaded, refused }
}

const namespacePattern = /^[a-z][a-z0-9_]*$/

/** The namespaces a plugin declares (default: its name), refused when malformed or already had. */
function claimNamespaces(
  definition: PluginDefinition,
  owners: ReadonlyMap<string, string>,
  catalog: CommandCatalog,
): string[] {
  // A name that makes no namespace (say `MyPlugin`) gives none: such a plugin registers no command unless it declares some.
  const derived = definition.name.replaceAll('-', '_')
  const declared = definition.namespaces ?? (namespacePattern.test(derived) ? [derived] : [])
  if (!Array.isArray(declared)) throw new Error('its "namespaces" must be a list of lowercase snake names')
  for (const namespace of declared) {
    if (typeof namespace !== 'string' || !namespacePattern.test(namespace))
      throw new Error(
        `namespace ${JSON.stringify(namespace)} is malformed: namespaces are lowercase snake names like "rdm"`,
      )
    const owner =
      owners.get(namespace) ?? catalog.list().find((command) => command.spec.id.split('.')[0] === namespace)?.plugin
    if (owner)
      throw new Error(`namespace ${namespace} belongs to ${owner === 'core' ? 'Plinth itself' : `plugin ${owner}`}`)
  }
  return declared
}

async function importPlugin(specifier: string, cwd: string): Promise<PluginDefinition> {
  const url = resolveSpecifier(specifier, cwd)
  let module: { default?: unknown; plugin?: unknown }
  try {
    module = (await import(url)) as typeof module
  } catch (error) {
    // TypeScript without a TypeScript-aware loader in this process (the built server): through tsx.
    if ((error as { code?: string }).code !== 'ERR_UNKNOWN_FILE_EXTENSION' || !/\.[cm]?ts$/.test(url)) throw error
    const { tsImport } = await import('tsx/esm/api')
    module = (await tsImport(url, import.meta.url)) as typeof module
  }
  let definition = (module.default ?? module.plugin) as (Partial<PluginDefinition> & { default?: unknown }) | undefined
  // A TypeScript file tsx ran as CommonJS: its exports object is the default.
  if (definition && typeof definition.setup !== 'function' && definition.default)
    definition = definition.default as Partial<PluginDefinition>
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

/** Bare names of bundled plugins, paths, then packages installed where the server runs. */
function resolveSpecifier(specifier: string, cwd: string): string {
  if (/^[a-z][a-z0-9_-]*$/.test(specifier)) {
    const bundled = bundledPlugin(specifier)
    if (bundled) return pathToFileURL(bundled).href
  }
  if (specifier.startsWith('.') || isAbsolute(specifier)) {
    const path = isAbsolute(specifier) ? specifier : resolve(cwd, specifier)
    if (!existsSync(path)) throw new Error(`no file or folder ${path}`)
    if (statSync(path).isDirectory()) {
      const main = packageEntry(path)
      if (main) return pathToFileURL(main).href
      for (const index of ['index.js', 'index.mjs', 'index.ts', 'index.mts'])
        if (existsSync(join(path, index))) return pathToFileURL(join(path, index)).href
      throw new Error(`${path} is a folder without a package entry or an index.js/index.ts`)
    }
    return pathToFileURL(path).href
  }
  return pathToFileURL(resolvePackage(specifier, cwd)).href
}

/** A package's file as installed under `cwd` (or above it), for ESM-only packages too. */
function resolvePackage(specifier: string, cwd: string): string {
  try {
    return createRequire(join(cwd, 'plinth-plugins.cjs')).resolve(specifier)
  } catch {
    // An ESM-only package (exports with only an "import" condition): read its package.json.
    for (let dir = cwd; ; dir = dirname(dir)) {
      const folder = join(dir, 'node_modules', specifier)
      const entry = existsSync(join(folder, 'package.json')) ? packageEntry(folder) : undefined
      if (entry) return entry
      if (dirname(dir) === dir) break
    }
  }
  throw new Error(`cannot find the package ${specifier} from ${cwd} (install it there, or give a path)`)
}

/** The entry file a package.json names: exports ".", then module, then main. */
function packageEntry(folder: string): string | undefined {
  const file = join(folder, 'package.json')
  if (!existsSync(file)) return undefined
  const manifest = JSON.parse(readFileSync(file, 'utf8')) as { exports?: unknown; module?: unknown; main?: unknown }
  const pick = (value: unknown): string | undefined => {
    if (typeof value === 'string') return value
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      const record = value as Record<string, unknown>
      if ('.' in record) return pick(record['.'])
      for (const condition of ['import', 'node', 'default']) {
        const picked = pick(record[condition])
        if (picked) return picked
      }
    }
    return undefined
  }
  const entry =
    pick(manifest.exports) ??
    (typeof manifest.module === 'string' ? manifest.module : undefined) ??
    (typeof manifest.main === 'string' ? manifest.main : undefined)
  return entry ? resolve(folder, entry) : undefined
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
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(message)), ms))),
    ])
  } finally {
    clearTimeout(timer)
  }
}
