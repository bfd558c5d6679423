import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import fastifyStatic from '@fastify/static'
import type { FastifyInstance } from 'fastify'

const here = fileURLToPath(new URL('.', import.meta.url))
const compiled = here.includes('/dist/')

/** The console's files ship in the package (`console/`), beside `src/` and `dist/src/`. */
function consoleRoot(): string {
  return join(compiled ? join(here, '../../..') : join(here, '../..'), 'console')
}

/**
 * `plinth/client`'s modules for the page: the compiled files of the package (dist/src/client); run
 * from source (development, tests), each .ts file transpiled once with TypeScript, a dev dependency.
 */
const clientModules = new Map<string, Promise<string>>()
function clientModule(file: string): Promise<string> {
  let module = clientModules.get(file)
  if (!module) {
    module = compiled
      ? readFile(join(here, '../client', file), 'utf8')
      : Promise.all([
          import('typescript'),
          readFile(join(here, '../client', file.replace(/\.js$/, '.ts')), 'utf8'),
        ]).then(
          ([ts, source]) =>
            ts.default.transpileModule(source, {
              compilerOptions: {
                target: ts.default.ScriptTarget.ES2022,
                module: ts.default.ModuleKind.ESNext,
                verbatimModuleSyntax: true,
              },
            }).outputText,
        )
    module.catch(() => clientModules.delete(file))
    clientModules.set(file, module)
  }
  return module
}

/** The page's import map (inline, so it is allowed by its hash): bare imports of plinth/client's modules. */
function importMapHash(page: string): string | null {
  const map = /<script type="importmap">([\s\S]*?)<\/script>/.exec(page)?.[1]
  return map === undefined ? null : `'sha256-${createHash('sha256').update(map).digest('base64')}'`
}

// The page talks to this origin only, runs only its own scripts and cannot be framed.
const contentSecurityPolicy = (importMap: string | null): string =>
  [
    "default-src 'self'",
    `script-src 'self'${importMap ? ` ${importMap}` : ''}`,
    "style-src 'self'",
    "connect-src 'self'",
    "img-src 'self' data: blob:",
    "frame-ancestors 'none'",
    "base-uri 'none'",
    "form-action 'self'",
  ].join('; ')

/** ES modules the console imports from /console/vendor/. */
const vendorModules = { 'marked.js': 'marked', 'purify.js': 'dompurify', 'eventsource-parser.js': 'eventsource-parser' }

/** `GET /console/`: the web console, static files served by this server (no separate process, no CDN). */
export async function registerConsole(app: FastifyInstance): Promise<void> {
  const root = consoleRoot()
  // A copy without the console's files still starts (the page then answers 404).
  const page = await readFile(join(root, 'index.html'), 'utf8').catch(() => '')
  const importMap = importMapHash(page)
  const securityHeaders = {
    'content-security-policy': contentSecurityPolicy(importMap),
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
  }
  // The page itself, at /console and /console/ (the router ignores trailing slashes; the page links
  // its files by absolute path, so both work).
  app.get('/console', { schema: { hide: true } }, async (_request, reply) => {
    const page = await readFile(join(root, 'index.html'))
    return reply
      .headers({ ...securityHeaders, 'cache-control': 'no-cache' })
      .type('text/html; charset=utf-8')
      .send(page)
  })
  // The Markdown renderer and its sanitizer, served from their installed packages (kept by npm, no copy).
  for (const [file, specifier] of Object.entries(vendorModules)) {
    const path = fileURLToPath(import.meta.resolve(specifier))
    app.get(`/console/vendor/${file}`, { schema: { hide: true } }, async (_request, reply) =>
      reply
        .headers({ ...securityHeaders, 'cache-control': 'no-cache' })
        .type('text/javascript; charset=utf-8')
        .send(await readFile(path)),
    )
  }
  // plinth/client, the same modules a browser app bundles: the console's one HTTP and stream reader.
  app.get<{ Params: { file: string } }>('/console/client/:file', { schema: { hide: true } }, async (request, reply) => {
    const { file } = request.params
    if (!/^[a-z][a-z-]*\.js$/.test(file)) return reply.code(404).type('text/plain').send('not found')
    const source = await clientModule(file).catch(() => null)
    if (source === null) return reply.code(404).type('text/plain').send('not found')
    return reply
      .headers({ ...securityHeaders, 'cache-control': 'no-cache' })
      .type('text/javascript; charset=utf-8')
      .send(source)
  })
  await app.register(fastifyStatic, {
    root,
    prefix: '/console/',
    decorateReply: false,
    index: false,
    // Always revalidate: a new release's files are picked up at once (ETag keeps it cheap).
    cacheControl: true,
    maxAge: 0,
    setHeaders: (response) => {
      for (const [name, value] of Object.entries(securityHeaders)) response.setHeader(name, value)
    },
    schemaHide: true,
  })
}
