import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { sql, testDb as kysely } from '../src/store/test-access.js'
import { isDatabaseUnavailable } from '../src/store/index.js'
import { createTestDatabase, testEngines, type TestDatabase } from './helpers/engines.js'
import { adminQuery } from './helpers/pg-admin.js'

// A database restart or failover closes every connection, including ones a transaction holds between
// two statements (docs/guides/scaling.md#when-postgres-goes-away). The process must live through it and
// the pool must serve the next statement on a new connection.
const engines = testEngines()
if (!engines.includes('postgres'))
  console.warn('[plinth tests] skipping the database-outage tests: they need Postgres (TEST_DATABASE_URL)')

describe.skipIf(!engines.includes('postgres'))('connections closed by the database', () => {
  let database: TestDatabase
  let store: Store
  beforeAll(async () => {
    database = await createTestDatabase('postgres')
    store = await database.open()
  })
  afterAll(async () => {
    await store?.close()
    await database?.drop()
  })

  it('a connection terminated while a transaction holds it fails that transaction, not the process', async () => {
    const uncaught: unknown[] = []
    const onUncaught = (error: unknown): void => void uncaught.push(error)
    process.on('uncaughtException', onUncaught)
    try {
      const failed = await store
        .transaction(async (tx) => {
          const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(kysely(tx))
          // Terminated between two statements: no query of this client is pending when the error arrives.
          await adminQuery(database.url!, `select pg_terminate_backend(${rows[0]!.pid})`)
          await new Promise((resolve) => setTimeout(resolve, 200))
          await sql`select 1`.execute(kysely(tx))
        })
        .then(
          () => null,
          (error: unknown) => error,
        )
      expect(failed).toBeInstanceOf(Error)
      expect(isDatabaseUnavailable(failed)).toBe(true)
      expect(uncaught).toEqual([])
      // The next statement gets a working connection.
      const { rows } = await sql<{ one: number }>`select 1 as one`.execute(kysely(store))
      expect(rows[0]!.one).toBe(1)
    } finally {
      process.off('uncaughtException', onUncaught)
    }
  })
})

describe('a request while the database is away', () => {
  it('answers 503 service_unavailable with Retry-After, not 500', async () => {
    const { default: Fastify } = await import('fastify')
    const { handleError } = await import('../src/server/error-handler.js')
    const app = Fastify({ logger: false })
    app.setErrorHandler(handleError)
    // What node-postgres raises when the server restarts under a query, and when it refuses connections.
    const restarting = Object.assign(new Error('terminating connection due to administrator command'), {
      code: '57P01',
    })
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })
    app.get('/restarting', async () => Promise.reject(restarting))
    app.get('/refused', async () => Promise.reject(refused))
    app.get('/lost', async () => Promise.reject(new Error('Connection terminated unexpectedly')))
    app.get('/bug', async () => Promise.reject(new TypeError('x is not a function')))
    try {
      for (const path of ['/restarting', '/refused', '/lost']) {
        const answer = await app.inject({ method: 'GET', url: path })
        expect([answer.statusCode, answer.json().code, answer.headers['retry-after']]).toEqual([
          503,
          'service_unavailable',
          '2',
        ])
        expect(answer.body).not.toContain('5432')
      }
      const bug = await app.inject({ method: 'GET', url: '/bug' })
      expect([bug.statusCode, bug.json().code]).toEqual([500, 'internal'])
    } finally {
      await app.close()
    }
  })
})
