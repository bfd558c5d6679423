import { setTimeout as sleep } from 'node:timers/promises'
import { describe, expect, it } from 'vitest'
import { PGlitePool } from '../src/store/pglite/pglite-pool.js'

// The embedded database runs in the server's thread, and its statements resolve without I/O. Runs taking
// the session one after another must still let the event loop turn between them, or a loaded instance
// stops accepting connections and reading requests (docs/guides/scaling.md#overload).
describe('PGlite pool', () => {
  async function withPool(use: (pool: PGlitePool) => Promise<void>): Promise<void> {
    const { PGlite } = await import('@electric-sql/pglite')
    const pool = new PGlitePool(await PGlite.create())
    try {
      await use(pool)
    } finally {
      await pool.end()
    }
  }

  /** `count` statements one after another, each on the session taken for it; `onDone` after each. */
  async function statements(pool: PGlitePool, count: number, onDone: () => void): Promise<void> {
    for (let index = 0; index < count; index++) {
      const client = await pool.connect()
      try {
        await client.query('select $1::int as n', [index])
        onDone()
      } finally {
        client.release()
      }
    }
  }

  it('refuses a statement binding more parameters than the protocol counts, and the session goes on', async () => {
    await withPool(async (pool) => {
      const client = await pool.connect()
      try {
        // Past 65,535 the count wraps: PGlite's session would fall out of step for good.
        const values = Array.from({ length: 70_000 }, (_, index) => index)
        const text = `select ${values.map((_, index) => `$${index + 1}::int`).join(' + ')} as n`
        await expect(client.query(text, values)).rejects.toMatchObject({ code: '54000' })
        const after = await client.query<{ n: number }>('select $1::int + 1 as n', [41])
        expect(after.rows).toEqual([{ n: 42 }])
      } finally {
        client.release()
      }
    })
  })

  it('lets timers and I/O in between statements while many callers queue for the session', async () => {
    await withPool(async (pool) => {
      const callers = 20
      const statementsEach = 25
      let done = 0
      const all = Promise.all(Array.from({ length: callers }, () => statements(pool, statementsEach, () => done++)))
      // A timer set now stands for a connection to accept or a request to read.
      await sleep(0)
      const doneWhenTimerRan = done
      await all
      expect(done).toBe(callers * statementsEach)
      expect(doneWhenTimerRan).toBeLessThan(done / 4)
    })
  })

  it("lets the loop turn during one caller's long chain of statements on an idle session", async () => {
    // One request's reads and writes, one after another with nobody else waiting: without a turn in
    // between, a burst of connections was taken in one request at a time, each run to its end.
    await withPool(async (pool) => {
      const count = 400
      let done = 0
      let doneWhenTurned: number | undefined
      setImmediate(() => {
        doneWhenTurned = done
      })
      await statements(pool, count, () => done++)
      expect(doneWhenTurned).toBeDefined()
      expect(doneWhenTurned!).toBeLessThan(count)
    })
  })

  it('background work waits until a chain of statements is over, or at most its wait', async () => {
    await withPool(async (pool) => {
      // Quiet at once: nothing holds the session.
      await pool.quiet(60_000)
      // A request's chain: each statement taken on its own, the session free between them for a moment.
      let done = 0
      const chain = statements(pool, 50, () => done++)
      await sleep(0)
      await pool.quiet(60_000)
      const doneWhenQuiet = done
      await chain
      expect(doneWhenQuiet).toBe(50)
      // Under load that never lets up, it goes on after its wait: slowed, not starved.
      let busy = true
      const load = (async () => {
        while (busy) await statements(pool, 1, () => undefined)
      })()
      const began = performance.now()
      await pool.quiet(200)
      expect(performance.now() - began).toBeGreaterThanOrEqual(150)
      busy = false
      await load
    })
  })
})
