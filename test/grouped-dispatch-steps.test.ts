import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { verifyAuditChain } from '../src/cmdbus/index.js'
import {
  renewDispatchExecutor,
  writeDispatchSteps,
  type AuditEntryInput,
  type DispatchStep,
  type Store,
} from '../src/store/index.js'
import { sql, testDb } from '../src/store/test-access.js'
import { createTestDatabase, testEngines, type TestDatabase } from './helpers/engines.js'
import { seedProject, type SeedScope } from './helpers/store-seed.js'

// The audited steps of concurrent dispatches share one statement (docs/architecture.md#the-command-bus).
for (const engine of testEngines()) {
  describe(`grouped dispatch steps on ${engine}`, () => {
    let database: TestDatabase
    let store: Store
    let scope: SeedScope

    beforeAll(async () => {
      database = await createTestDatabase(engine)
      store = await database.open()
      scope = await seedProject(store, 'steps')
    })
    afterAll(async () => {
      await store?.close()
      await database?.drop()
    })

    const entry = (dispatchId: string, step: string): AuditEntryInput => ({
      dispatchId,
      step,
      ownerId: scope.ownerId,
      projectId: scope.projectId,
      conversationId: null,
      commandId: 'rdm.ping',
      entrance: 'button',
      // Non-ASCII and quotes: the hash is computed in SQL from the canonical JSON.
      envelope: { id: dispatchId, step, note: 'café "quoted" ✓' },
    })
    const start = (id: string, key: string | null = null): DispatchStep => ({
      kind: 'start',
      dispatch: {
        id,
        commandId: 'rdm.ping',
        plugin: 'rdm',
        pluginVersion: '1',
        entrance: 'button',
        actor: { type: 'user', id: scope.ownerId, onBehalfOf: scope.ownerId },
        ownerId: scope.ownerId,
        projectId: scope.projectId,
        conversationId: null,
        runId: null,
        callId: null,
        idempotencyKey: key,
        params: { target: id },
        paramsHash: 'h',
        requestHash: key && 'r',
        risk: 'low',
        status: 'running',
        decisionId: null,
        executor: { id: 'steps.1', expiresAt: new Date(Date.now() + 60_000) },
      },
      audits: [entry(id, 'requested'), entry(id, 'running')],
    })
    const finish = (id: string): DispatchStep => ({
      kind: 'finish',
      id,
      status: 'succeeded',
      result: { pong: id },
      audit: entry(id, 'finished'),
    })
    const entriesOf = async (ids: string[]) =>
      testDb(store)
        .selectFrom('audit_log')
        .select(['id', 'dispatch_id', 'step'])
        .where('dispatch_id', 'in', ids)
        .orderBy('id')
        .execute()

    it('writes starts and finishes of several dispatches in one statement, skipping a start whose key is taken', async () => {
      await writeDispatchSteps(store, [start('g-0', 'key-taken')])
      const written = await writeDispatchSteps(store, [
        start('g-1'),
        finish('g-0'),
        start('g-2', 'key-taken'),
        start('g-3', 'key-free'),
        finish('g-missing'),
      ])
      expect(written).toEqual([true, true, false, true, false])
      const entries = await entriesOf(['g-0', 'g-1', 'g-2', 'g-3', 'g-missing'])
      expect(entries.map((row) => `${row.dispatch_id}:${row.step}`)).toEqual([
        'g-0:requested',
        'g-0:running',
        'g-1:requested',
        'g-1:running',
        'g-0:finished',
        'g-3:requested',
        'g-3:running',
      ])
      // One chain, no gaps: the last five ids follow one another.
      const ids = entries.slice(2).map((row) => Number(row.id))
      expect(ids).toEqual(ids.map((_, index) => ids[0]! + index))
      const rows = await testDb(store)
        .selectFrom('dispatches')
        .select(['id', 'status', 'result'])
        .where('id', 'in', ['g-0', 'g-1', 'g-2', 'g-3'])
        .orderBy('id')
        .execute()
      expect(rows).toEqual([
        { id: 'g-0', status: 'succeeded', result: { pong: 'g-0' } },
        { id: 'g-1', status: 'running', result: null },
        { id: 'g-3', status: 'running', result: null },
      ])
      expect(await verifyAuditChain(store)).toMatchObject({ ok: true })
      // Two new dispatches with one key in one statement: the first is written, the second is not.
      expect(await writeDispatchSteps(store, [start('g-5', 'key-twice'), start('g-6', 'key-twice')])).toEqual([
        true,
        false,
      ])
      expect((await entriesOf(['g-5', 'g-6'])).map((row) => `${row.dispatch_id}:${row.step}`)).toEqual([
        'g-5:requested',
        'g-5:running',
      ])
      // A statement whose steps all wrote nothing leaves the chain as it was.
      const tail = await testDb(store).selectFrom('audit_chain').selectAll().executeTakeFirstOrThrow()
      expect(await writeDispatchSteps(store, [start('g-4', 'key-taken')])).toEqual([false])
      expect(await testDb(store).selectFrom('audit_chain').selectAll().executeTakeFirstOrThrow()).toEqual(tail)
    })

    it('concurrent dispatches through the store are each answered and chained once, in order', async () => {
      const ids = Array.from({ length: 40 }, (_, index) => `c-${index}`)
      expect(await Promise.all(ids.map((id) => store.dispatchStep(start(id))))).toEqual(ids.map(() => true))
      expect(await Promise.all(ids.map((id) => store.dispatchStep(finish(id))))).toEqual(ids.map(() => true))
      const entries = await entriesOf(ids)
      for (const id of ids)
        expect(entries.filter((row) => row.dispatch_id === id).map((row) => row.step)).toEqual([
          'requested',
          'running',
          'finished',
        ])
      expect(await verifyAuditChain(store)).toMatchObject({ ok: true })
    })

    it("the executor's lease renewal extends its running dispatches only", async () => {
      expect(await writeDispatchSteps(store, [start('r-1'), start('r-2'), start('r-3')])).toEqual([true, true, true])
      await writeDispatchSteps(store, [finish('r-3')])
      const later = new Date(Date.now() + 3_600_000)
      await renewDispatchExecutor(store, 'steps.1', later)
      await renewDispatchExecutor(store, 'another-instance', new Date(0))
      const rows = await testDb(store)
        .selectFrom('dispatches')
        .select(['id', 'executor_expires_at'])
        .where('id', 'in', ['r-1', 'r-2', 'r-3'])
        .orderBy('id')
        .execute()
      expect(rows.map((row) => row.executor_expires_at?.getTime() === later.getTime())).toEqual([true, true, false])
    })

    if (engine === 'postgres') {
      it('finishing several dispatches while their lease is renewed never deadlocks', async () => {
        const other = await database.open()
        try {
          for (let round = 0; round < 15; round++) {
            const ids = Array.from({ length: 12 }, (_, index) => `lock-${round}-${String(index).padStart(2, '0')}`)
            expect(
              await writeDispatchSteps(
                store,
                ids.map((id) => start(id)),
              ),
            ).toEqual(ids.map(() => true))
            // The finishes name the rows in the order opposite to the one the renewal finds them in.
            const renewals = [0, 1, 2].map(() => renewDispatchExecutor(other, 'steps.1', new Date(Date.now() + 60_000)))
            const finished = writeDispatchSteps(
              store,
              [...ids].reverse().map((id) => finish(id)),
            )
            await Promise.all(renewals)
            expect(await finished).toEqual(ids.map(() => true))
          }
        } finally {
          await other.close()
        }
      })

      it('two instances writing groups at once keep one unbroken chain', async () => {
        const other = await database.open()
        try {
          const ids = (prefix: string) => Array.from({ length: 60 }, (_, index) => `${prefix}-${index}`)
          // Each instance starts and finishes its dispatches as fast as it can; their statements
          // wait for each other's hold on the chain's tail and must chain from what the other committed.
          const drive = (instance: Store, prefix: string) =>
            Promise.all(
              ids(prefix).map(async (id) => {
                expect(await instance.dispatchStep(start(id))).toBe(true)
                expect(await instance.dispatchStep(finish(id))).toBe(true)
              }),
            )
          const prefixes = ['two-a', 'two-b', 'two-c', 'two-d']
          await Promise.all(prefixes.map((prefix, index) => drive(index % 2 === 0 ? store : other, prefix)))
          const all = prefixes.flatMap(ids)
          expect((await entriesOf(all)).length).toBe(all.length * 3)
          const { rows } = await sql<{ n: string; distinct_ids: string; span: string }>`
            select count(*) as n, count(distinct id) as distinct_ids, max(id) - min(id) + 1 as span from audit_log`.execute(
            testDb(store),
          )
          expect(rows[0]!.n).toBe(rows[0]!.distinct_ids)
          expect(rows[0]!.n).toBe(rows[0]!.span)
          expect(await verifyAuditChain(store)).toMatchObject({ ok: true })
        } finally {
          await other.close()
        }
      })
    }
  })
}
