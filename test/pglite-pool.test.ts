import { setTimeout as sleep } from 'node:timers/promises'
import { describe, expect, it } from 'vitest'
import { PGlitePool } from '../src/store/pglite/pglite-pool.js'

// The embedded database runs in the server's thread, and its statements resolve without I/O. Runs taking
// the session one after another must still let the event loop turn between them, or a loaded instance
// stops accepting connections and reading requests (docs/guides/scaling.md#overload).
describe('PGlite pool', () => {
  it('lets timers and I/O in between statements while many callers queue for the session', async () => {
    const { PGlite } = await import('@electric-sql/pglite')
    const pglite = await PGlite.create()
    const pool = new PGlitePool(pglite)
    try {
      const callers = 20
      const statementsEach = 25
      let done = 0
      const caller = async (): Promise<void> => {
        for (let index = 0; index < statementsEach; index++) {
          const client = await pool.connect()
          try {
            await client.query('select $1::int as n', [index])
            done++
          } finally {
            client.release()
          }
        }
      }
      const all = Promise.all(Array.from({ length: callers }, caller))
      // A timer set now stands for a connection to accept or a request to read.
      await sleep(0)
      const doneWhenTimerRan = done
      await all
      expect(done).toBe(callers * statementsEach)
      expect(doneWhenTimerRan).toBeLessThan(done / 4)
    } finally {
      await pool.end()
    }
  })
})
