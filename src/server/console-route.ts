import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import fastifyStatic from '@fastify/static'
import type { FastifyInstance } from 'fastify'

/** The console's files ship in the package (`console/`), beside `src/` and `dist/src/`. */
function consoleRoot(): string {
  const here = fileURLToPath(new URL('.', import.meta.url))
  const root = here.includes('/dist/') ? join(here, '../../..') : join(here, '../..')
  return join(root, 'console')
}

// The page talks to this origin only, runs only its own scripts and cannot be framed.
const contentSecurityPolicy = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'self'",
].join('; ')

/** ES modules the console imports from /console/vendor/. */
const vendorModules = { 'marked.js': 'marked', 'purify.js': 'dompurify' }

/** `GET /console/`: the web console, static files served by this server (no separate process, no CDN). */
export async function registerConsole(app: FastifyInstance): Promise<void> {
  const root = consoleRoot()
  const securityHeaders = { 'content-security-policy': contentSecurityPolicy, 'x-content-type-options': 'nosniff', 'referrer-policy': 'no-referrer' }
  // The page itself, at /console and /console/ (the router ignores trailing slashes; the page links
  // its files by absolute path, so both work).
  app.get('/console', { schema: { hide: true } }, async (_request, reply) => {
    const page = await readFile(join(root, 'index.html'))
    return reply.headers({ ...securityHeaders, 'cache-control': 'no-cache' }).type('text/html; charset=utf-8').send(page)
  })
  // The Markdown renderer and its sanitizer, served from their installed packages (kept by npm, no copy).
  for (const [file, specifier] of Object.entries(vendorModules)) {
    const path = fileURLToPath(import.meta.resolve(specifier))
    app.get(`/console/vendor/${file}`, { schema: { hide: true } }, async (_request, reply) =>
      reply.headers({ ...securityHeaders, 'cache-control': 'no-cache' }).type('text/javascript; charset=utf-8').send(await readFile(path)),
    )
  }
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
