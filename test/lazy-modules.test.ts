import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { http, startServe, type ServeProcess } from './helpers/cli-process.js'

// What a server that nobody has asked for MCP, AG-UI or an HTML or DOCX upload does not load: each is
// loaded on first use, which keeps an idle server's memory and start time down
// (docs/reference/benchmarks.md#start-and-cli-latency).

const registerHook = new URL('./__fixtures__/module-log/register.mjs', import.meta.url).href
const notAtStart = [
  '/node_modules/@modelcontextprotocol/',
  '/node_modules/zod/',
  '/node_modules/@ag-ui/',
  '/node_modules/turndown/',
  '/node_modules/yauzl/',
  '/node_modules/mammoth/',
  '/node_modules/pdfjs-dist/',
  // The built server loads these as one module each from dist/vendor/ (scripts/vendor.mjs).
  '/node_modules/typebox/',
  '/node_modules/kysely/',
]

describe('modules loaded at start', () => {
  let cwd: string | undefined
  let server: ServeProcess | undefined

  afterAll(async () => {
    await server?.kill()
    if (cwd) await rm(cwd, { recursive: true, force: true })
  })

  it(
    'a started server has not loaded the MCP SDK, AG-UI or the document converters',
    { timeout: 240_000 },
    async () => {
      cwd = await mkdtemp(join(tmpdir(), 'plinth-lazy-'))
      const log = join(cwd, 'modules.log')
      server = await startServe({
        cwd,
        env: { NODE_OPTIONS: `--import=${registerHook}`, MODULE_LOG_FILE: log },
        timeoutMs: 180_000,
      })
      expect((await http(server.url, 'GET', '/healthz')).status).toBe(200)
      const loaded = (await readFile(log, 'utf8')).split('\n')
      // The log works: the server's own modules and its HTTP framework are in it.
      expect(loaded.some((url) => url.includes('/node_modules/fastify/'))).toBe(true)
      expect(loaded.some((url) => url.endsWith('/dist/vendor/kysely.js'))).toBe(true)
      for (const part of notAtStart) expect(loaded.filter((url) => url.includes(part)).slice(0, 3), part).toEqual([])
    },
  )
})
