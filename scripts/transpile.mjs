// Compiles src/ and plugins/ to dist/ for running: each TypeScript file transpiled on its own with
// esbuild (types stripped, nothing bundled), in about a second where tsc takes many. Type checking
// stays with `npm test` (`tsc --noEmit`); `npm run build` (the package, with declarations) uses tsc.
import { readdirSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

const root = fileURLToPath(new URL('..', import.meta.url))

function sources(dir, out = []) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name)
    if (name === 'node_modules' || name === '__fixtures__') continue
    if (statSync(path).isDirectory()) sources(path, out)
    else if (name.endsWith('.ts') && !name.endsWith('.test.ts') && !name.endsWith('.d.ts')) out.push(path)
  }
  return out
}

export async function transpile() {
  const entryPoints = ['src', 'plugins'].flatMap((dir) => sources(join(root, dir)))
  await build({
    entryPoints,
    outdir: join(root, 'dist'),
    outbase: root,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    sourcemap: true,
    bundle: false,
    logLevel: 'warning',
    tsconfig: join(root, 'tsconfig.json'),
  })
  return entryPoints.map((path) => relative(root, path))
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const files = await transpile()
  console.error(`plinth: transpiled ${files.length} files to dist/`)
}
