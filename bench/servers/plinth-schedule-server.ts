/**
 * Plinth for the schedule bench: the composition root (real config loading, so its schedule firer at
 * its default tick) on the DATABASE_URL the bench passes, with the models PLINTH_CONFIG names. Nothing
 * is seeded: the bench writes the users, projects and schedules itself, and several of these share one
 * database.
 *
 * To say which instance fired what without touching the server's code, it watches its own database
 * round trips (pg `Client#query`): the firing rows its claims inserted, and the firings its runs marked
 * started, served as JSON on a side port (`statsUrl` on the ready line) with its CPU time.
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import pg from 'pg'
import { createLogger, loadConfig, startServer } from '../../src/app/index.js'
import { announceReady, fail } from '../lib/child-side.js'

const claimed: string[] = []
let started = 0

const original = pg.Client.prototype.query as (...args: unknown[]) => unknown
;(pg.Client.prototype as unknown as Record<string, unknown>).query = function watched(
  this: unknown,
  ...args: unknown[]
): unknown {
  const result = original.apply(this, args)
  const sql = args[0] as string | { text?: string } | undefined
  const text = (typeof sql === 'string' ? sql : sql?.text) ?? ''
  const claim = text.startsWith('insert into "schedule_firings"')
  const start = !claim && /^update "schedule_firings" set "status" = \$1, "run_id" = \$2/.test(text)
  // pg's callback form returns undefined; Plinth (through Kysely) always uses promises.
  if ((claim || start) && result instanceof Promise)
    result.then(
      (answer: { rows?: Array<{ id?: unknown }>; rowCount?: number | null }) => {
        if (claim) for (const row of answer.rows ?? []) if (typeof row.id === 'string') claimed.push(row.id)
        if (start) started += answer.rowCount ?? 0
      },
      () => undefined,
    )
  return result
}

try {
  const dataDir = process.env.PLINTH_DATA_DIR
  if (!dataDir || !process.env.PLINTH_CONFIG || !process.env.DATABASE_URL)
    throw new Error('PLINTH_DATA_DIR, PLINTH_CONFIG and DATABASE_URL must be set')
  const config = loadConfig(process.env, dataDir)
  const server = await startServer(config, createLogger(config.logLevel))
  const statsServer = createServer((_request, response) => {
    const cpu = process.cpuUsage()
    response
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ claimed, started, cpuMs: (cpu.user + cpu.system) / 1000 }))
  })
  try {
    await new Promise<void>((resolve) => statsServer.listen(0, '127.0.0.1', resolve))
    const statsUrl = `http://127.0.0.1:${(statsServer.address() as AddressInfo).port}/`
    announceReady(server.url, { engine: server.store.engine, statsUrl }, async () => {
      statsServer.close()
      await server.close()
    })
  } catch (error) {
    statsServer.close()
    await server.close()
    throw error
  }
} catch (error) {
  fail(error)
}
