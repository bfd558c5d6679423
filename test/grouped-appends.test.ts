import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  GroupedAppends,
  appendGrouped,
  readEvents,
  type AppendItem,
  type EventRecord,
  type NewEvent,
  type Store,
} from '../src/store/index.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { seedProject, startedRun, type SeedScope } from './helpers/store-seed.js'
import { testDb } from '../src/store/test-access.js'

// Streamed deltas of concurrent runs share one statement (docs/architecture.md#the-event-log).
for (const engine of testEngines()) {
  describe(`grouped appends on ${engine}`, () => {
    let store: Store
    let scope: SeedScope

    beforeAll(async () => {
      store = await openTestStore(engine)
      scope = await seedProject(store, 'grouped')
    })
    afterAll(async () => store?.close())

    /** A running run in its own conversation, leased to `owner`. */
    async function runningRun(owner: string): Promise<{ runId: string; conversationId: string }> {
      const run = await startedRun(store, scope, owner)
      return { runId: run.id, conversationId: run.conversationId }
    }

    const delta = (run: { runId: string; conversationId: string }, text: string): NewEvent => ({
      type: 'message.delta',
      runId: run.runId,
      conversationId: run.conversationId,
      projectId: scope.projectId,
      userId: scope.ownerId,
      data: { text },
    })

    it('appends that arrive while a statement is in flight share the next one, each answered with its own events', async () => {
      const runs = await Promise.all([1, 2, 3, 4, 5].map((n) => runningRun(`grouped.${n}`)))
      const groups: number[] = []
      const committed: EventRecord[] = []
      const grouped = new GroupedAppends(
        (items) => {
          groups.push(items.length)
          return appendGrouped(store, items, '')
        },
        (events) => committed.push(...events),
      )
      // Twenty appends at once, four per run, each of two events.
      const calls = runs.flatMap((run, r) =>
        [0, 1, 2, 3].map((k) => ({
          run,
          texts: [`r${r}k${k}a`, `r${r}k${k}b`],
          answer: grouped.append([delta(run, `r${r}k${k}a`), delta(run, `r${r}k${k}b`)], {
            runId: run.runId,
            owner: `grouped.${r + 1}`,
          }),
        })),
      )
      const answers = await Promise.all(calls.map((call) => call.answer))
      // The first went alone; the other nineteen shared one statement.
      expect(groups).toEqual([1, 19])
      answers.forEach((records, index) => {
        expect(records.map((record) => record.data.text)).toEqual(calls[index]!.texts)
        expect(records.every((record) => record.runId === calls[index]!.run.runId)).toBe(true)
        expect(records[1]!.id).toBe(records[0]!.id + 1)
      })
      // Handed to the feed in id order, every one of them, as each group committed.
      expect(committed.map((event) => event.id)).toEqual(
        answers
          .flat()
          .map((event) => event.id)
          .sort((a, b) => a - b),
      )
      // The table holds each run's deltas in the order they were appended.
      for (const [r, run] of runs.entries()) {
        const stored = await readEvents(store, { runId: run.runId }, 0, 100)
        expect(stored.filter((event) => event.type === 'message.delta').map((event) => event.data.text)).toEqual(
          [0, 1, 2, 3].flatMap((k) => [`r${r}k${k}a`, `r${r}k${k}b`]),
        )
      }
    })

    it('an append whose lease has passed writes nothing, and the others in its statement are written', async () => {
      const live = await runningRun('grouped.live')
      const lost = await runningRun('grouped.lost')
      // Another instance took the run over.
      await testDb(store)
        .updateTable('runs')
        .set({ lease_owner: 'grouped.other' })
        .where('id', '=', lost.runId)
        .execute()
      const items: AppendItem[] = [
        { events: [delta(live, 'kept 1')], fence: { runId: live.runId, owner: 'grouped.live' } },
        { events: [delta(lost, 'dropped')], fence: { runId: lost.runId, owner: 'grouped.lost' } },
        { events: [delta(live, 'kept 2'), delta(live, 'kept 3')], fence: { runId: live.runId, owner: 'grouped.live' } },
        { events: [{ type: 'test.unfenced', projectId: scope.projectId, data: { n: 1 } }] },
      ]
      const answers = await appendGrouped(store, items, '')
      expect(answers.map((records) => records.map((record) => record.data.text ?? record.data.n))).toEqual([
        ['kept 1'],
        [],
        ['kept 2', 'kept 3'],
        [1],
      ])
      expect((await readEvents(store, { runId: lost.runId }, 0, 100)).map((event) => event.type)).not.toContain(
        'message.delta',
      )
      // A run that ended (not running) fences its appends too.
      await testDb(store).updateTable('runs').set({ status: 'cancelled' }).where('id', '=', live.runId).execute()
      expect(
        await appendGrouped(
          store,
          [{ events: [delta(live, 'late')], fence: { runId: live.runId, owner: 'grouped.live' } }],
          '',
        ),
      ).toEqual([[]])
    })

    it('an append the database refuses fails alone: the others of its statement are written', async () => {
      const run = await runningRun('grouped.refused')
      const groups: number[] = []
      const grouped = new GroupedAppends(
        (items) => {
          groups.push(items.length)
          return appendGrouped(store, items, '')
        },
        () => undefined,
      )
      const fence = { runId: run.runId, owner: 'grouped.refused' }
      const first = grouped.append([delta(run, 'first')], fence)
      // `type` is NOT NULL: this append's row is refused.
      const bad = grouped.append([{ ...delta(run, 'bad'), type: null as unknown as string }], fence)
      const after = grouped.append([delta(run, 'after')], fence)
      await expect(bad).rejects.toMatchObject({ code: '23502' })
      expect((await first).map((record) => record.data.text)).toEqual(['first'])
      expect((await after).map((record) => record.data.text)).toEqual(['after'])
      // The shared statement failed, and its two appends were then tried one by one.
      expect(groups).toEqual([1, 2, 1, 1])
      const stored = await readEvents(store, { runId: run.runId }, 0, 100)
      expect(stored.filter((event) => event.type === 'message.delta').map((event) => event.data.text)).toEqual([
        'first',
        'after',
      ])
    })

    it("the store's own appends reach its feed in order, however they were grouped", async () => {
      const run = await runningRun('grouped.store')
      const fence = { runId: run.runId, owner: 'grouped.store' }
      const seen: number[] = []
      const done = new Promise<void>((resolve) => {
        const stop = store.feed.subscribe(`run:${run.runId}`, (event) => {
          if (event.type !== 'message.delta') return
          seen.push(Number(String(event.data.text)))
          if (seen.length === 30) {
            stop()
            resolve()
          }
        })
      })
      const answers = await Promise.all(
        Array.from({ length: 30 }, (_, n) => store.appendEvents([delta(run, String(n))], fence)),
      )
      await done
      expect(seen).toEqual(Array.from({ length: 30 }, (_, n) => n))
      expect(answers.map((records) => records[0]!.data.text)).toEqual(Array.from({ length: 30 }, (_, n) => String(n)))
    })
  })
}
