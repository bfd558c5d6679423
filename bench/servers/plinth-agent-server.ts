/**
 * Plinth for the agent bench: the composition root with the config file PLINTH_CONFIG names (the
 * fake upstream's models, the bench weather plugin), on whatever DATABASE_URL / PLINTH_DATA_DIR the
 * bench passes, seeded with a user, a token and a project.
 *
 * It also counts database round trips (pg `Client#query`, PGlite `query`/`exec`/`execProtocol` — the
 * last being how prepared statements run) and the time spent
 * awaiting them, served as JSON on a side port (`statsUrl` on the ready line), so the bench can say
 * where a round's time goes without touching the server's code.
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { performance } from 'node:perf_hooks'
import { PGlite } from '@electric-sql/pglite'
import pg from 'pg'
import { createLogger, loadConfig, startServer } from '../../src/app/index.js'
import { createProject, createToken, createUser } from '../../src/store/index.js'
import { announceReady, fail } from '../lib/child-side.js'

const stats = { queries: 0, queryMs: 0 }

/** Wraps `target[name]` (a promise-returning method) to count calls and their duration. */
function count(target: object, name: string): void {
  const record = target as Record<string, unknown>
  const original = record[name] as (...args: unknown[]) => unknown
  record[name] = function counted(this: unknown, ...args: unknown[]): unknown {
    // Timed from the call: PGlite runs a protocol message synchronously before it returns its promise.
    const started = performance.now()
    const result = original.apply(this, args)
    if (process.env.BENCH_QUERY_LOG) {
      const sql = args[0] as string | Uint8Array | { text?: string }
      // PGlite's prepared statements are protocol messages (their parse, then each execution).
      const text = typeof sql === 'string' ? sql : sql instanceof Uint8Array ? '(a prepared statement)' : sql.text
      process.stderr.write(`QUERY ${text}\n`.replace(/\s+/g, ' ') + '\n')
    }
    // pg's callback form returns undefined; Plinth (through Kysely) always uses promises.
    if (result instanceof Promise) {
      stats.queries++
      const settle = (): void => {
        stats.queryMs += performance.now() - started
      }
      result.then(settle, settle)
    }
    return result
  }
}
count(pg.Client.prototype, 'query')
count(PGlite.prototype, 'query')
count(PGlite.prototype, 'exec')
count(PGlite.prototype, 'execProtocol')

try {
  const dataDir = process.env.PLINTH_DATA_DIR
  if (!dataDir || !process.env.PLINTH_CONFIG) throw new Error('PLINTH_DATA_DIR and PLINTH_CONFIG must be set')
  const config = loadConfig(process.env, dataDir)
  const server = await startServer(config, createLogger(config.logLevel))
  const statsServer = createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        ...stats,
        cpuMs: (process.cpuUsage().user + process.cpuUsage().system) / 1000,
        userMs: process.cpuUsage().user / 1000,
        rssMb: process.memoryUsage().rss / 2 ** 20,
      }),
    )
  })
  try {
    const user = await createUser(server.store, 'bench')
    if ('error' in user) throw new Error(`cannot create bench user: ${user.error}`)
    const { token } = await createToken(server.store, user.id, 'bench')
    const project = await server.store.transaction((tx) =>
      createProject(tx, user.id, { name: 'agent bench', description: 'agent-round bench' }),
    )
    await new Promise<void>((resolve) => statsServer.listen(0, '127.0.0.1', resolve))
    const statsUrl = `http://127.0.0.1:${(statsServer.address() as AddressInfo).port}/`
    announceReady(server.url, { token, projectId: project.id, engine: server.store.engine, statsUrl }, async () => {
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
