import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { verifyAuditChain } from '../src/cmdbus/index.js'
import { loadConfig } from '../src/app/index.js'
import {
  announceAccessChange,
  appendAuditEntry,
  auditAppendManyCtes,
  createConversation,
  insertDispatchStarted,
  toolCallStartedWithDispatch,
  appendEvents,
  createProject,
  createUser,
  dumpMigratedPGlite,
  fenceRun,
  renewLease,
  openStore,
  readEvents,
  readMigrations,
  migrate,
  streamEvents,
  readEventPage,
  StoreError,
  type EventRecord,
  type Store,
} from '../src/store/index.js'
import { createTestDatabase, openTestStore, testEngines } from './helpers/engines.js'
import { sql, testDb, testExecutor } from '../src/store/test-access.js'
import { runView } from '../src/resources/index.js'

for (const engine of testEngines()) {
  describe(`store on ${engine}`, () => {
    let store: Store
    let ownerId: string

    beforeAll(async () => {
      store = await openTestStore(engine)
      const user = await createUser(store, 'owner')
      if ('error' in user) throw new Error('unexpected')
      ownerId = user.id
    })
    afterAll(async () => store?.close())

    it('has the vector extension (pgvector) enabled', async () => {
      const { rows } = await sql<{ distance: number }>`select '[1,0]'::vector <=> '[0,1]'::vector as distance`.execute(
        testDb(store),
      )
      expect(rows[0]?.distance).toBeCloseTo(1)
    })

    it('records applied migrations with their checksums and applies nothing twice', async () => {
      const rows = await testDb(store).selectFrom('plinth_migrations').selectAll().execute()
      const files = await readMigrations()
      expect(rows.map((row) => [row.name, row.checksum])).toEqual(files.map((file) => [file.name, file.checksum]))
    })

    it('writes a change and its event atomically: a failed transaction leaves neither', async () => {
      const before = await testDb(store)
        .selectFrom('events')
        .select(sql<string>`count(*)`.as('n'))
        .executeTakeFirstOrThrow()
      await expect(
        store.transaction(async (tx) => {
          await createProject(tx, ownerId, { name: 'doomed' })
          throw new Error('boom')
        }),
      ).rejects.toThrow('boom')
      const after = await testDb(store)
        .selectFrom('events')
        .select(sql<string>`count(*)`.as('n'))
        .executeTakeFirstOrThrow()
      expect(after.n).toBe(before.n)
      const doomed = await testDb(store).selectFrom('projects').select('id').where('name', '=', 'doomed').execute()
      expect(doomed).toEqual([])
    })

    it('appends several entries in one statement, chained in order, while single appends run concurrently', async () => {
      const entry = (step: string) => ({
        dispatchId: null,
        step,
        ownerId,
        projectId: null,
        conversationId: null,
        commandId: 'test.audit',
        entrance: 'api',
        envelope: { text: `批 ${step} “q” 🙂`, quote: '"id":987654321012345' },
      })
      const before = await testDb(store)
        .selectFrom('audit_log')
        .select(sql<string>`count(*)`.as('n'))
        .executeTakeFirstOrThrow()
      await Promise.all(
        Array.from({ length: 10 }, (_, writer) =>
          writer % 2 === 0
            ? sql`with ${auditAppendManyCtes([entry(`m${writer}:a`), entry(`m${writer}:b`), entry(`m${writer}:c`)], sql``).sql} select count(*) from audit_entry`.execute(
                testDb(store),
              )
            : store.transaction((tx) => appendAuditEntry(tx, entry(`s${writer}`))),
        ),
      )
      const rows = await testDb(store).selectFrom('audit_log').select(['id', 'step']).orderBy('id').execute()
      expect(rows.length - Number(before.n)).toBe(5 * 3 + 5)
      // A statement's entries are consecutive and in the order given.
      for (const writer of [0, 2, 4, 6, 8]) {
        const ids = ['a', 'b', 'c'].map((part) => Number(rows.find((row) => row.step === `m${writer}:${part}`)!.id))
        expect(ids).toEqual([ids[0], ids[0]! + 1, ids[0]! + 2])
      }
      expect(await verifyAuditChain(store)).toEqual({ ok: true, checked: rows.length })
    })

    it("records a dispatch that runs at once in one statement, only under its run's lease, and not twice for one key", async () => {
      const project = await store.transaction((tx) => createProject(tx, ownerId, { name: 'dispatch-start' }))
      const conversation = await store.transaction((tx) => createConversation(tx, { projectId: project.id, ownerId }))
      const lease = { owner: 'this-instance.1', expiresAt: new Date(Date.now() + 60_000) }
      const started = await store.createRun(
        {
          conversationId: conversation.id,
          projectId: project.id,
          ownerId,
          model: 'm',
          maxIterations: 3,
          approvalPolicy: 'ask',
          clientTools: [],
          input: 'hi',
          view: runView,
        },
        { lease, allowQueue: false },
      )
      if (!('run' in started)) throw new Error('the conversation has an active run')
      const run = started.run
      const dispatch = (id: string) => ({
        id,
        commandId: 'test.cmd',
        plugin: 'test',
        pluginVersion: '1',
        entrance: 'agent',
        actor: { type: 'agent' as const, id: run.id, onBehalfOf: ownerId },
        ownerId,
        projectId: project.id,
        conversationId: conversation.id,
        runId: run.id,
        callId: 'call-1',
        idempotencyKey: `${run.id}:call-1`,
        params: { q: 'x' },
        paramsHash: 'h',
        requestHash: 'r',
        risk: 'low',
        status: 'requested' as const,
        decisionId: null,
        executor: { id: 'exec-1', expiresAt: new Date(Date.now() + 30_000) },
      })
      const audits = (id: string) =>
        ['requested', 'running'].map((step) => ({
          dispatchId: id,
          step,
          ownerId,
          projectId: project.id,
          conversationId: conversation.id,
          commandId: 'test.cmd',
          entrance: 'agent',
          envelope: { id, step },
        }))
      const part = (owner: string) => ({
        fence: { runId: run.id, owner, expiresAt: new Date(Date.now() + 60_000) },
        writes: [toolCallStartedWithDispatch(store, 'call-1')],
        events: [
          {
            type: 'test.started',
            runId: run.id,
            conversationId: conversation.id,
            projectId: project.id,
            userId: ownerId,
            data: {},
          },
        ],
      })
      const count = async (table: 'audit_log' | 'events') =>
        Number(
          (
            await testDb(store)
              .selectFrom(table)
              .select(sql<string>`count(*)`.as('n'))
              .executeTakeFirstOrThrow()
          ).n,
        )
      const [audit0, events0] = [await count('audit_log'), await count('events')]
      // Another instance holds the lease: nothing at all is written.
      const stale = await store.statement((db, tag) =>
        insertDispatchStarted(db, dispatch('d-stale'), audits('d-stale'), part('another-instance.1'), tag),
      )
      expect(stale).toMatchObject({ fenced: false, inserted: false, events: [] })
      expect(await testDb(store).selectFrom('dispatches').select('id').where('id', '=', 'd-stale').execute()).toEqual(
        [],
      )
      expect([await count('audit_log'), await count('events')]).toEqual([audit0, events0])
      // The lease holder: the row (running), both entries in order, the event.
      const fresh = await store.statement((db, tag) =>
        insertDispatchStarted(db, dispatch('d-1'), audits('d-1'), part(lease.owner), tag),
      )
      expect(fresh).toMatchObject({ fenced: true, inserted: true })
      expect(fresh.events.map((event) => event.type)).toEqual(['test.started'])
      const row = await testDb(store)
        .selectFrom('dispatches')
        .select(['status', 'executor'])
        .where('id', '=', 'd-1')
        .executeTakeFirstOrThrow()
      expect(row).toEqual({ status: 'running', executor: 'exec-1' })
      const entries = await testDb(store)
        .selectFrom('audit_log')
        .select(['id', 'step'])
        .where('dispatch_id', '=', 'd-1')
        .orderBy('id')
        .execute()
      expect(entries.map((entry) => entry.step)).toEqual(['requested', 'running'])
      expect(Number(entries[1]!.id)).toBe(Number(entries[0]!.id) + 1)
      // The same key again: nothing written.
      const again = await store.statement((db, tag) =>
        insertDispatchStarted(db, dispatch('d-2'), audits('d-2'), part(lease.owner), tag),
      )
      expect(again).toMatchObject({ fenced: true, inserted: false, events: [] })
      expect([await count('audit_log'), await count('events')]).toEqual([audit0 + 2, events0 + 1])
      expect(await verifyAuditChain(store)).toMatchObject({ ok: true })
    })

    it("updates a running run's row in place (HOT): a round's state changes and the lease's renewals add no index entries", async () => {
      const project = await store.transaction((tx) => createProject(tx, ownerId, { name: 'hot-updates' }))
      const conversation = await store.transaction((tx) => createConversation(tx, { projectId: project.id, ownerId }))
      const lease = { owner: 'this-instance.1', expiresAt: new Date(Date.now() + 60_000) }
      const started = await store.createRun(
        {
          conversationId: conversation.id,
          projectId: project.id,
          ownerId,
          model: 'm',
          maxIterations: 3,
          approvalPolicy: 'ask',
          clientTools: [],
          input: 'hi',
          view: runView,
        },
        { lease, allowQueue: false },
      )
      if (!('run' in started)) throw new Error('the conversation has an active run')
      const runId = started.run.id
      // (docs/reference/benchmarks.md#the-round-on-postgres)
      const counts = await store.transaction(async (tx) => {
        // The session's counts not yet reported (earlier transactions' included): the difference is ours.
        const read = async () => {
          const { rows } = await sql<{ updated: string; hot: string }>`select
              pg_stat_get_xact_tuples_updated('runs'::regclass)::text as updated,
              pg_stat_get_xact_tuples_hot_updated('runs'::regclass)::text as hot`.execute(testDb(tx))
          return { updated: Number(rows[0]!.updated), hot: Number(rows[0]!.hot) }
        }
        const before = await read()
        const later = (ms: number) => new Date(Date.now() + ms)
        await fenceRun(tx, runId, lease.owner, later(61_000), { iteration: 1, phase: 'thinking' })
        await fenceRun(tx, runId, lease.owner, later(62_000), {
          phase: 'tool_running',
          usage: {
            inputTokens: 10,
            outputTokens: 5,
            cachedInputTokens: 0,
            reasoningTokens: 0,
            modelCalls: 1,
            cost: null,
          },
        })
        expect(await renewLease(tx, runId, lease.owner, later(63_000))).toBe(true)
        const after = await read()
        return { updated: after.updated - before.updated, hot: after.hot - before.hot }
      })
      expect(counts).toEqual({ updated: 3, hot: 3 })
    })

    it('a run followed since its creation replays from memory exactly what the table holds; others read the table', async () => {
      const project = await store.transaction((tx) => createProject(tx, ownerId, { name: 'replay' }))
      const conversation = await store.transaction((tx) => createConversation(tx, { projectId: project.id, ownerId }))
      const started = await store.createRun(
        {
          conversationId: conversation.id,
          projectId: project.id,
          ownerId,
          model: 'm',
          maxIterations: 1,
          approvalPolicy: 'ask',
          clientTools: [],
          input: 'hi',
          view: runView,
        },
        { lease: { owner: 'replay.1', expiresAt: new Date(Date.now() + 60_000) }, allowQueue: false },
      )
      if (!('run' in started)) throw new Error('the conversation has an active run')
      const run = started.run
      for (let index = 0; index < 5; index++) {
        await store.appendEvents([
          {
            type: 'message.delta',
            runId: run.id,
            conversationId: conversation.id,
            projectId: project.id,
            userId: ownerId,
            data: { text: `t${index} 🙂` },
          },
        ])
      }
      await store.feed.flush()
      const table = (await readEventPage(store, { runId: run.id }, 0, 500, 1 << 20)).events
      expect(table.length).toBeGreaterThanOrEqual(7)
      expect(store.feed.recentRunEvents(run.id, 0)).toEqual(table)
      expect(store.feed.recentRunEvents(run.id, table[3]!.id)).toEqual(table.slice(4))
      expect(store.feed.recentRunEvents(run.id, table.at(-1)!.id)).toEqual([])
      // A run this feed did not see created has no record here.
      expect(store.feed.recentRunEvents('no-such-run', 0)).toBeUndefined()
      // A stream replays the same, then follows live.
      const controller = new AbortController()
      const seen: number[] = []
      const reader = (async () => {
        for await (const event of streamEvents(
          store,
          store.feed,
          { runId: run.id },
          { afterId: table[1]!.id, signal: controller.signal },
        )) {
          seen.push(event.id)
          if (seen.length === table.length - 2 + 1) controller.abort()
        }
      })()
      const [live] = await store.appendEvents([
        {
          type: 'run.status',
          runId: run.id,
          conversationId: conversation.id,
          projectId: project.id,
          userId: ownerId,
          data: {},
        },
      ])
      await reader
      expect(seen).toEqual([...table.slice(2).map((event) => event.id), live!.id])
      await testDb(store)
        .updateTable('runs')
        .set({ status: 'completed', lease_owner: null })
        .where('id', '=', run.id)
        .execute()
    })

    it('chains audit entries from concurrent transactions, any text included; a rolled-back append leaves no gap; a removed newest entry is detected', async () => {
      const entry = (step: string, text: string) => ({
        dispatchId: null,
        step,
        ownerId,
        projectId: null,
        conversationId: null,
        commandId: 'test.audit',
        entrance: 'api',
        envelope: { text, nested: { id: 5, ownerId: 'x' }, quote: '"id":987654321012345' },
      })
      const start = await testDb(store)
        .selectFrom('audit_log')
        .select(sql<string>`count(*)`.as('n'))
        .executeTakeFirstOrThrow()
      await Promise.all(
        Array.from({ length: 12 }, (_, writer) =>
          store.transaction(async (tx) => {
            for (let step = 0; step < 3; step++) {
              await appendAuditEntry(tx, entry(`w${writer}:${step}`, `写入 ${writer} — “quotes” \\ 🙂 ${step}`))
              await new Promise((resolve) => setTimeout(resolve, writer % 3))
            }
          }),
        ),
      )
      await expect(
        store.transaction(async (tx) => {
          await appendAuditEntry(tx, entry('doomed', 'rolled back'))
          throw new Error('boom')
        }),
      ).rejects.toThrow('boom')
      await store.transaction((tx) => appendAuditEntry(tx, entry('after', 'after the rollback')))
      const rows = await testDb(store).selectFrom('audit_log').select(['id', 'step']).orderBy('id').execute()
      expect(rows.length - Number(start.n)).toBe(37)
      expect(rows.map((row) => Number(row.id))).toEqual(rows.map((_, index) => index + 1))
      expect(rows.some((row) => row.step === 'doomed')).toBe(false)
      expect(await verifyAuditChain(store)).toEqual({ ok: true, checked: rows.length })
      // Removing entries from the end leaves a chain that links, but it no longer reaches the recorded tail.
      await testDb(store).deleteFrom('audit_log').where('id', '=', rows.at(-1)!.id).execute()
      const verdict = await verifyAuditChain(store)
      expect(verdict.ok).toBe(false)
      expect(verdict.firstBad?.id).toBe(rows.length)
      expect(verdict.firstBad?.reason).toMatch(/newest entries are missing/)
    })

    it("hands a transaction's own events to this instance's feed as it commits (no read, no wait for the notification)", async () => {
      const project = await store.transaction((tx) => createProject(tx, ownerId, { name: 'own-events' }))
      const seen: string[] = []
      const stop = store.feed.subscribe(`project:${project.id}`, (event) => seen.push(event.type))
      try {
        await store.transaction((tx) => appendEvents(tx, [{ type: 'test.own', projectId: project.id, data: {} }]))
        // Delivered before the transaction's promise resolved, not when the NOTIFY comes back.
        expect(seen).toEqual(['test.own'])
      } finally {
        stop()
      }
    })

    it('hears its own access announcement back from the database, so a revocation can wait until every listener was signalled', async () => {
      const heard: string[] = []
      const stop = store.access.subscribe((subject) => heard.push(subject))
      try {
        const echoed = store.access.echo('token:echo-test', 10_000)
        const started = Date.now()
        await announceAccessChange(store, ['token:echo-test'])
        await echoed()
        // Resolved by the notification, not by the timeout.
        expect(Date.now() - started).toBeLessThan(5_000)
        expect(heard).toContain('token:echo-test')
        // A wait for a subject never announced ends at its timeout.
        const never = store.access.echo('token:never-announced', 50)
        await never()
      } finally {
        stop()
      }
    })

    it('refuses to append events outside a transaction', async () => {
      await expect(appendEvents(store, [{ type: 'x', data: {} }])).rejects.toThrow(/inside a transaction/)
    })

    it('gives event ids in commit order under concurrent writers, and a live reader sees every one exactly once', async () => {
      const project = await store.transaction((tx) => createProject(tx, ownerId, { name: 'busy' }))
      const controller = new AbortController()
      const seen: number[] = []
      const total = 60
      const reader = (async () => {
        for await (const event of streamEvents(
          store,
          store.feed,
          { projectId: project.id },
          { afterId: 0, signal: controller.signal },
        )) {
          seen.push(event.id)
          if (seen.length === total + 1) controller.abort()
        }
      })()
      // Writers with random delays inside their transactions, so commits interleave.
      await Promise.all(
        Array.from({ length: total }, (_, index) =>
          store.transaction(async (tx) => {
            await new Promise((resolve) => setTimeout(resolve, Math.random() * 10))
            await appendEvents(tx, [{ type: 'test.tick', projectId: project.id, data: { index } }])
          }),
        ),
      )
      await Promise.race([
        reader,
        new Promise((_, reject) => setTimeout(() => reject(new Error(`saw ${seen.length}`)), 10_000)),
      ])
      expect(seen).toHaveLength(total + 1)
      expect([...seen].sort((a, b) => a - b)).toEqual(seen)
      expect(new Set(seen).size).toBe(seen.length)
      const stored = await readEvents(store, { projectId: project.id }, 0, 1000)
      expect(stored.map((event) => event.id)).toEqual(seen)
    })

    it('hands this instance’s committed events to live listeners by the time the commit returns, and still keeps order after a gap', async () => {
      const project = await store.transaction((tx) => createProject(tx, ownerId, { name: 'local delivery' }))
      await store.feed.flush()
      const seen: string[] = []
      const unsubscribe = store.feed.subscribe(`project:${project.id}`, (event) => seen.push(event.type))
      try {
        await store.transaction((tx) => appendEvents(tx, [{ type: 'test.local.1', projectId: project.id, data: {} }]))
        // No notification round trip and no read of the table in between.
        expect(seen).toEqual(['test.local.1'])

        // A commit this instance does not track (as another instance's would be) leaves a gap
        // before the next local commit: the feed reads the table and delivers both, in order.
        await testDb(store)
          .transaction()
          .execute((tx) => appendEvents(testExecutor(tx), [{ type: 'test.foreign', projectId: project.id, data: {} }]))
        await store.transaction((tx) => appendEvents(tx, [{ type: 'test.local.2', projectId: project.id, data: {} }]))
        await store.feed.flush()
        expect(seen).toEqual(['test.local.1', 'test.foreign', 'test.local.2'])
      } finally {
        unsubscribe()
      }
    })

    it('replays from any point then continues live without a gap or duplicate', async () => {
      const project = await store.transaction((tx) => createProject(tx, ownerId, { name: 'replay' }))
      for (let index = 0; index < 5; index++) {
        await store.transaction((tx) =>
          appendEvents(tx, [{ type: 'test.before', projectId: project.id, data: { index } }]),
        )
      }
      const all = await readEvents(store, { projectId: project.id }, 0, 100)
      const resumeAfter = all[2]!.id
      const controller = new AbortController()
      const got: EventRecord[] = []
      const reader = (async () => {
        for await (const event of streamEvents(
          store,
          store.feed,
          { projectId: project.id },
          { afterId: resumeAfter, signal: controller.signal },
        )) {
          got.push(event)
          if (got.length === 6) controller.abort()
        }
      })()
      for (let index = 0; index < 3; index++) {
        await store.transaction((tx) =>
          appendEvents(tx, [{ type: 'test.after', projectId: project.id, data: { index } }]),
        )
      }
      await reader
      expect(got.map((event) => event.type)).toEqual([
        'test.before',
        'test.before',
        'test.before',
        'test.after',
        'test.after',
        'test.after',
      ])
      expect(got[0]!.id).toBe(all[3]!.id)
    })

    it('lets a reader that falls behind catch up from the table, in order, without holding others', async () => {
      const project = await store.transaction((tx) => createProject(tx, ownerId, { name: 'slow' }))
      const controller = new AbortController()
      const slow = streamEvents(
        store,
        store.feed,
        { projectId: project.id },
        { afterId: 0, signal: controller.signal, maxQueued: 5 },
      )
      const first = await slow.next() // the project.created event; the reader now waits live
      expect(first.value?.type).toBe('project.created')
      const fast: number[] = []
      const fastReader = (async () => {
        for await (const event of streamEvents(
          store,
          store.feed,
          { projectId: project.id },
          { afterId: 0, signal: controller.signal },
        )) {
          fast.push(event.id)
          if (fast.length === 31) break
        }
      })()
      for (let index = 0; index < 30; index++) {
        await store.transaction((tx) =>
          appendEvents(tx, [{ type: 'test.burst', projectId: project.id, data: { index } }]),
        )
      }
      await fastReader // the fast reader finished while the slow one read nothing
      await store.feed.flush()
      const slowIds: number[] = []
      for (let index = 0; index < 30; index++) {
        const next = await slow.next()
        slowIds.push(next.value!.id)
      }
      controller.abort()
      expect(slowIds).toEqual(fast.slice(1))
    })
  })
}

describe.runIf(testEngines().includes('postgres'))('prepared statements on Postgres', () => {
  it('a connection prepares the statements it repeats (not retrieval queries); PLINTH_PG_PREPARE=false sends them unnamed', async () => {
    const database = await createTestDatabase('postgres')
    try {
      for (const prepare of [true, false]) {
        const store = await openStore({ databaseUrl: database.url!, poolSize: 1, prepareStatements: prepare })
        try {
          for (let index = 0; index < 3; index++) {
            await sql`select ${index}::int as n`.execute(testDb(store))
            await sql`select ${'[1,0]'}::vector <=> ${'[0,1]'}::vector as d`.execute(testDb(store))
          }
          const { rows } = await sql<{
            statement: string
          }>`select statement from pg_prepared_statements where from_sql = false`.execute(testDb(store))
          const statements = rows.map((row) => row.statement)
          expect(statements.some((text) => text.includes('as n'))).toBe(prepare)
          expect(statements.some((text) => text.includes('<=>'))).toBe(false)
        } finally {
          await store.close()
        }
      }
    } finally {
      await database.drop()
    }
  })
  it('PLINTH_PG_SYNCHRONOUS_COMMIT=false: every pooled session commits without waiting for its WAL flush', async () => {
    const database = await createTestDatabase('postgres')
    try {
      const shipped = loadConfig({}, tmpdir())
      expect(shipped.pgSynchronousCommit).toBe(true)
      const chosen = loadConfig({ PLINTH_PG_SYNCHRONOUS_COMMIT: 'false' }, tmpdir())
      for (const synchronousCommit of [shipped.pgSynchronousCommit, chosen.pgSynchronousCommit]) {
        const store = await openStore({ databaseUrl: database.url!, poolSize: 3, synchronousCommit })
        try {
          // Three sessions at once: each its own pooled connection.
          const settings = await Promise.all(
            [0, 1, 2].map(async () => {
              const { rows } = await sql<{
                value: string
              }>`select current_setting('synchronous_commit') as value, pg_sleep(0.05)`.execute(testDb(store))
              return rows[0]!.value
            }),
          )
          expect(settings).toEqual(Array(3).fill(synchronousCommit ? 'on' : 'off'))
        } finally {
          await store.close()
        }
      }
    } finally {
      await database.drop()
    }
  })
})

describe('migrations', () => {
  it('refuses to start when an applied migration was changed, or is unknown (a newer release’s), naming it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plinth-mig-'))
    try {
      const { PGlite } = await import('@electric-sql/pglite')
      const { vector } = await import('@electric-sql/pglite/vector')
      const { PGlitePool } = await import('../src/store/pglite/pglite-pool.js')
      const pglite = await PGlite.create({ extensions: { vector } })
      const pool = new PGlitePool(pglite)
      const migrations = await readMigrations()
      await migrate(pool, migrations)
      const again = await migrate(pool, migrations)
      expect(again.applied).toEqual([])
      const changed = migrations.map((migration, index) =>
        index === 0 ? { ...migration, checksum: 'f'.repeat(64) } : migration,
      )
      const error = await migrate(pool, changed).catch((caught: unknown) => caught)
      expect(error).toBeInstanceOf(StoreError)
      expect((error as StoreError).code).toBe('migration_checksum_mismatch')
      expect((error as StoreError).message).toContain(migrations[0]!.name)
      // A database a newer release migrated: this one refuses it, naming what it does not know.
      await pglite.query(`insert into plinth_migrations (name, checksum) values ('9999_from_the_future.sql', 'x')`)
      const newer = await migrate(pool, migrations).catch((caught: unknown) => caught)
      expect(newer).toBeInstanceOf(StoreError)
      expect((newer as StoreError).code).toBe('migration_unknown')
      expect((newer as StoreError).message).toContain('9999_from_the_future.sql')
      await pool.end()
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('reads NNNN_name.sql files in order and ignores anything else', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plinth-migdir-'))
    try {
      await writeFile(join(dir, '0002_b.sql'), 'select 2;')
      await writeFile(join(dir, '0001_a.sql'), 'select 1;')
      await writeFile(join(dir, 'README.md'), 'not a migration')
      const migrations = await readMigrations(dir)
      expect(migrations.map((migration) => migration.name)).toEqual(['0001_a.sql', '0002_b.sql'])
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})

describe('embedded data directory', () => {
  it('keeps data across a restart and refuses a second process while locked', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plinth-data-'))
    try {
      const first = await openStore({ dataDir: dir })
      const user = await createUser(first, 'persisted')
      expect('error' in user).toBe(false)
      // Another live process holding the lock (this test's parent stands in for it).
      await first.close()
      const lockHolder = process.ppid
      await mkdir(dir, { recursive: true })
      await writeFile(join(dir, 'plinth.lock'), String(lockHolder))
      const refused = await openStore({ dataDir: dir }).catch((caught: unknown) => caught)
      expect((refused as StoreError).code).toBe('data_dir_locked')
      expect((refused as StoreError).message).toContain(String(lockHolder))
      // A stale lock (dead pid) is taken over.
      await writeFile(join(dir, 'plinth.lock'), '999999999')
      const second = await openStore({ dataDir: dir })
      const rows = await testDb(second).selectFrom('users').select('name').execute()
      expect(rows.map((row) => row.name)).toEqual(['persisted'])
      expect(second.migrations.applied).toEqual([])
      await second.close()
      expect(await readdir(dir)).not.toContain('plinth.lock')
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('a new data directory starts from the migrated template (no initdb, no migrations); an existing one ignores it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plinth-template-'))
    try {
      const template = join(dir, 'template.tar.gz')
      await writeFile(template, Buffer.from(await (await dumpMigratedPGlite('gzip')).arrayBuffer()))
      // What an earlier start cut off before it had a cluster left behind is replaced.
      await mkdir(join(dir, 'data', 'pg', 'base'), { recursive: true })
      await writeFile(join(dir, 'data', 'pg', 'half-written'), 'x')
      const fresh = await openStore({ dataDir: join(dir, 'data'), pgliteTemplate: template })
      expect(await readdir(join(dir, 'data', 'pg'))).not.toContain('half-written')
      expect((await readdir(dir)).filter((name) => name.includes('unpacking'))).toEqual([])
      // Everything was already applied in the template.
      expect(fresh.migrations.applied).toEqual([])
      expect(fresh.migrations.alreadyApplied).toBe((await readMigrations()).length)
      const user = await createUser(fresh, 'from-template')
      expect('error' in user).toBe(false)
      const buffers = await sql<{ shared_buffers: string }>`show shared_buffers`.execute(testDb(fresh))
      expect(buffers.rows[0]?.shared_buffers).toBe('16MB')
      await fresh.close()
      // Restarted: its own data, not the template's.
      const again = await openStore({ dataDir: join(dir, 'data'), pgliteTemplate: template })
      expect((await testDb(again).selectFrom('users').select('name').execute()).map((row) => row.name)).toEqual([
        'from-template',
      ])
      await again.close()
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('fails with a clear error when the data directory is not writable', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plinth-ro-'))
    try {
      // Root ignores permission bits, so use a path below a regular file.
      await writeFile(join(dir, 'file'), '')
      const error = await openStore({ dataDir: join(dir, 'file', 'data') }).catch((caught: unknown) => caught)
      expect(error).toBeInstanceOf(StoreError)
      expect((error as StoreError).code).toBe('data_dir_unwritable')
      expect((error as StoreError).message).toMatch(/not writable/)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('fails with a clear error, password hidden, when DATABASE_URL is unreachable', async () => {
    const error = await openStore({ databaseUrl: 'postgres://someone:hunter2@127.0.0.1:1/nowhere' }).catch(
      (caught: unknown) => caught,
    )
    expect(error).toBeInstanceOf(StoreError)
    expect((error as StoreError).code).toBe('database_unreachable')
    expect((error as StoreError).message).toContain('127.0.0.1:1')
    expect((error as StoreError).message).not.toContain('hunter2')
  })
})
