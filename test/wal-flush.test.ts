import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openStore, type Store } from '../src/store/index.js'
import { deferFlushColumn, walBarrier, WalFlush } from '../src/store/wal-flush.js'
import { sql, testDb } from '../src/store/test-access.js'
import { createTestDatabase, testEngines, type TestDatabase } from './helpers/engines.js'
import { startTestServer } from './helpers/test-server.js'

// Audited statements on Postgres commit without waiting for their WAL flush and are answered once it
// happened (docs/guides/scaling.md#deferred-wal-flush).
describe.runIf(testEngines().includes('postgres'))('deferred WAL flush on Postgres', () => {
  let database: TestDatabase
  let store: Store

  beforeAll(async () => {
    database = await createTestDatabase('postgres')
    store = await database.open()
    await sql`create table flush_probe (n int)`.execute(testDb(store))
  })
  afterAll(async () => {
    await store?.close()
    await database?.drop()
  })

  it('answers a statement that let go of its locks before its flush only once its commit is on disk', async () => {
    for (let attempt = 0; attempt < 20; attempt++) {
      const written = await store.statement(async (db, _tag, deferFlush) => {
        expect(deferFlush).toBe(true)
        const { rows } = await sql<{
          setting: string
        }>`with w as (insert into flush_probe values (${attempt}) returning n)
           select ${deferFlushColumn}, current_setting('synchronous_commit') as setting from w`.execute(testDb(db))
        // Where the WAL ends after that commit: the flush must reach it before the store answers.
        const end = await sql<{ lsn: string }>`select pg_current_wal_insert_lsn()::text as lsn`.execute(testDb(db))
        return { events: [], flushDeferred: true, setting: rows[0]!.setting, lsn: end.rows[0]!.lsn }
      })
      expect(written.setting).toBe('off')
      const { rows } = await sql<{
        flushed: boolean
      }>`select pg_current_wal_flush_lsn() >= ${written.lsn}::pg_lsn as flushed`.execute(testDb(store))
      expect(rows[0]!.flushed).toBe(true)
    }
  })

  it('lets callers who ask while a barrier is in flight share the next one', async () => {
    let barriers = 0
    const flush = new WalFlush(async () => {
      barriers++
      await walBarrier(store)
    })
    expect(await flush.available()).toBe(true)
    barriers = 0
    await Promise.all(Array.from({ length: 30 }, () => flush.after()))
    // The first caller's barrier, then one for the 29 who asked while it was in flight.
    expect(barriers).toBe(2)
  })

  it('fails the wait when the flush cannot be confirmed', async () => {
    const flush = new WalFlush(async () => {
      throw new Error('Connection terminated unexpectedly')
    })
    await expect(flush.after()).rejects.toThrow('Connection terminated')
    expect(await flush.available()).toBe(false)
  })

  it('defers nothing when the operator turned synchronous commit off (no commit waits for its flush then)', async () => {
    const chosen = await openStore({ databaseUrl: database.url!, poolSize: 2, synchronousCommit: false })
    try {
      const seen = await chosen.statement(async (_db, _tag, deferFlush) => ({ events: [], deferFlush }))
      // Sessions already commit without their flush: there is nothing to wait for.
      expect(seen.deferFlush).toBe(false)
    } finally {
      await chosen.close()
    }
  })

  it('answers concurrent audited dispatches, each chained once, with the chain intact', async () => {
    const adminToken = 'admin-secret-0123456789'
    const server = await startTestServer(store, { adminToken, plugins: ['rdm'] })
    try {
      const alice = await server.createUser()
      const answers = await Promise.all(
        Array.from({ length: 40 }, () =>
          server.request('POST', '/api/commands/rdm.ping', { token: alice.token, body: { entrance: 'button' } }),
        ),
      )
      expect(answers.map((answer) => answer.status)).toEqual(Array(40).fill(200))
      const { rows } = await sql<{ step: string; n: string }>`
        select step, count(*) as n from audit_log where command_id = 'rdm.ping' group by step order by step`.execute(
        testDb(store),
      )
      expect(rows.map((row) => [row.step, Number(row.n)])).toEqual([
        ['finished', 40],
        ['requested', 40],
        ['running', 40],
      ])
      const verdict = await server.request('GET', '/api/admin/audit/verify', { token: adminToken })
      expect(verdict.body).toMatchObject({ ok: true })
    } finally {
      await server.close()
    }
  })
})
