// Bundles the two libraries the server loads at every start, typebox and kysely, into one minified
// module each under dist/vendor/, and points dist/'s imports of them there. Loaded from node_modules they
// are ≈ 640 small modules: ≈ 0.3 s of a start and ≈ 35 MB of RSS that one file each does not cost
// (docs/reference/benchmarks.md#start-and-cli-latency). Sources and tests keep importing the packages.
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

const root = fileURLToPath(new URL('..', import.meta.url))
const dist = join(root, 'dist')
const vendored = ['typebox', 'kysely']

function outputs(dir, out = []) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) outputs(path, out)
    else if (name.endsWith('.js')) out.push(path)
  }
  return out
}

export async function vendor() {
  await build({
    entryPoints: Object.fromEntries(vendored.map((name) => [name, name])),
    outdir: join(dist, 'vendor'),
    absWorkingDir: root,
    bundle: true,
    minify: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    logLevel: 'warning',
  })
  const imports = new RegExp(`(from\\s*|import\\s*\\(\\s*)(["'])(${vendored.join('|')})\\2`, 'g')
  let rewritten = 0
  for (const dir of ['src', 'plugins']) {
    let files
    try {
      files = outputs(join(dist, dir))
    } catch {
      continue
    }
    for (const file of files) {
      const text = readFileSync(file, 'utf8')
      const next = text.replace(imports, (_, keyword, quote, name) => {
        const target = relative(dirname(file), join(dist, 'vendor', `${name}.js`))
        return `${keyword}${quote}${target.startsWith('.') ? target : `./${target}`}${quote}`
      })
      if (next !== text) {
        writeFileSync(file, next)
        rewritten++
      }
    }
  }
  return rewritten
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const files = await vendor()
  console.error(`plinth: typebox and kysely bundled into dist/vendor/, ${files} files pointed there`)
}
