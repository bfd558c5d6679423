import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimMessages, releaseWebhookClaims, type Store } from '../src/store/index.js'
import { testDb } from '../src/store/test-access.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { seedProject } from './helpers/store-seed.js'
import { waitFor } from './helpers/waits.js'

// An attempt whose instance died is logged with when it started, not when the loss was noticed
// (docs/webhooks.md, the delivery log).
for (const engine of testEngines()) {
  describe(`a webhook attempt lost with its instance, on ${engine}`, () => {
    let store: Store
    beforeAll(async () => {
      store = await openTestStore(engine)
    })
    afterAll(async () => store?.close())

    /** A subscription with one message due, in a project of its own; the message's row id. */
    const dueMessage = async (name: string): Promise<string> => {
      const scope = await seedProject(store, name)
      const db = testDb(store)
      await db
        .insertInto('webhooks')
        .values({
          id: `wh-${name}`,
          project_id: scope.projectId,
          created_by: scope.ownerId,
          url: 'http://127.0.0.1:9/hook',
          secret: 'whsec_x',
          events: ['run.completed'],
        })
        .execute()
      const message = await db
        .insertInto('webhook_messages')
        .values({ webhook_id: `wh-${name}`, event_id: 1, event_type: 'x' })
        .returning('id')
        .executeTakeFirstOrThrow()
      return String(message.id)
    }
    const claimed = async (owner: string, leaseMs: number, row: string) =>
      (await claimMessages(store, owner, 10, leaseMs)).some((item) => item.row === row)
    /** The lost attempt's start, checked against when it was claimed: within a second, not a lease later. */
    const expectStartedAt = async (row: string, claimedAt: number) => {
      const attempts = await testDb(store)
        .selectFrom('webhook_attempts')
        .select(['started_at', 'error'])
        .where('message_id', '=', row)
        .execute()
      expect(attempts).toHaveLength(1)
      expect(attempts[0]!.error).toMatch(/no outcome recorded/)
      const started = new Date(attempts[0]!.started_at as unknown as string).getTime()
      expect(Math.abs(started - claimedAt)).toBeLessThan(1000)
    }

    it('is recorded as started when it was claimed', async () => {
      const row = await dueMessage('lost')
      const claimedAt = Date.now()
      expect(await claimed('dead-instance', 1500, row)).toBe(true)
      // The instance dies; once its lease runs out another claims the message.
      await waitFor(() => claimed('live-instance', 1500, row), { timeoutMs: 20_000, what: 'the message due again' })
      await expectStartedAt(row, claimedAt)
    })

    it('is recorded as started when it was claimed after an embedded server released its claims at start', async () => {
      const row = await dueMessage('released')
      const claimedAt = Date.now()
      expect(await claimed('dead-instance', 60_000, row)).toBe(true)
      // Restarted a little later: the claims are released, the message due at once.
      await waitFor(() => Date.now() - claimedAt > 1500, { what: 'time passing' })
      await releaseWebhookClaims(store)
      expect(await claimed('restarted', 60_000, row)).toBe(true)
      await expectStartedAt(row, claimedAt)
    })
  })
}
