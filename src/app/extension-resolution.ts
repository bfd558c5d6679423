import { existsSync } from 'node:fs'
import Module, { register } from 'node:module'
import { fileURLToPath } from 'node:url'
import * as extension from '../extension/index.js'

/**
 * Makes `import … from 'plinth/extension'` resolve to this server's own extension surface, from any
 * file: a plugin loaded by path from a folder without node_modules, a TypeScript plugin that tsx runs
 * as CommonJS, or an installed package that bundles its own copy. One copy means one SurfaceVersion and
 * one CommandError class. ESM imports go through a module resolution hook, CommonJS requires through
 * the require cache; both only answer for `plinth/extension` and pass everything else on.
 */
export function resolveExtensionToSelf(): void {
  if (installed) return
  installed = true
  // dist/src/app → dist/src/extension/index.js; src/app (run through tsx) → src/extension/index.ts.
  const file = ['index.js', 'index.ts']
    .map((name) => fileURLToPath(new URL(`../extension/${name}`, import.meta.url)))
    .find((path) => existsSync(path))
  if (!file) return
  // Resolved as if this module imported it: run from source, tsx loads Plinth's modules under a
  // namespace, and the plugin must get that very module (through tsx), not a second copy.
  const map = { 'plinth/extension': { specifier: '../extension/index.js', parentURL: import.meta.url } }
  register(`data:text/javascript,${encodeURIComponent(hooks)}`, { data: { map } })
  // CommonJS (a TypeScript plugin tsx compiles to CommonJS): the require cache answers with the
  // exports of the module this server already runs.
  const internals = Module as unknown as {
    _resolveFilename: (request: string, ...rest: unknown[]) => string
    _cache: Record<string, unknown>
  }
  const cached = new Module(file)
  cached.filename = file
  cached.loaded = true
  cached.exports = { ...extension }
  internals._cache[file] = cached
  const original = internals._resolveFilename
  internals._resolveFilename = function (this: unknown, request: string, ...rest: unknown[]): string {
    return request === 'plinth/extension' ? file : original.call(this, request, ...rest)
  }
}

let installed = false

/** Runs in Node's loader thread (module.register): maps the named specifiers, defers the rest. */
const hooks = `
let map = {}
export function initialize(data) { map = data.map }
export async function resolve(specifier, context, next) {
  const target = map[specifier]
  return target ? next(target.specifier, { ...context, parentURL: target.parentURL }) : next(specifier, context)
}
`
