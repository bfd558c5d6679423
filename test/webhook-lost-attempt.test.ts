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

    it('is recorded as started when it was claimed', async () => {
      const scope = await seedProject(store, 'hooks')
      const db = testDb(store)
      await db
        .insertInto('webhooks')
        .values({
          id: 'wh-lost',
          project_id: scope.projectId,
          created_by: scope.ownerId,
          url: 'http://127.0.0.1:9/hook',
          secret: 'whsec_x',
          events: ['run.completed'],
        })
        .execute()
      await db.insertInto('webhook_messages').values({ webhook_id: 'wh-lost', event_id: 1, event_type: 'x' }).execute()
      const claimedAt = Date.now()
      expect(await claimMessages(store, 'dead-instance', 10, 1500)).toHaveLength(1)
      // The instance dies; once its lease runs out another claims the message.
      await waitFor(async () => (await claimMessages(store, 'live-instance', 10, 1500)).length === 1, {
        timeoutMs: 20_000,
        what: 'the message due again',
      })
      const attempts = await db
        .selectFrom('webhook_attempts')
        .select(['attempt', 'started_at', 'error'])
        .orderBy('id')
        .execute()
      expect(attempts).toHaveLength(1)
      expect(attempts[0]!.error).toMatch(/no outcome recorded/)
      const started = new Date(attempts[0]!.started_at as unknown as string).getTime()
      // The database's clock is this machine's: within a second of the first claim, not 1.5 s later.
      expect(Math.abs(started - claimedAt)).toBeLessThan(1000)
    })

    it('is recorded as started when it was claimed after an embedded server released its claims at start', async () => {
      const scope = await seedProject(store, 'hooks-release')
      const db = testDb(store)
      await db
        .insertInto('webhooks')
        .values({
          id: 'wh-released',
          project_id: scope.projectId,
          created_by: scope.ownerId,
          url: 'http://127.0.0.1:9/hook',
          secret: 'whsec_x',
          events: ['run.completed'],
        })
        .execute()
      const message = await db
        .insertInto('webhook_messages')
        .values({ webhook_id: 'wh-released', event_id: 1, event_type: 'x' })
        .returning('id')
        .executeTakeFirstOrThrow()
      const claimedAt = Date.now()
      const mine = (claimed: Array<{ row: string }>) => claimed.filter((item) => item.row === String(message.id))
      expect(mine(await claimMessages(store, 'dead-instance', 10, 60_000))).toHaveLength(1)
      // Restarted a little later: the claims are released, the message due at once.
      await waitFor(() => Date.now() - claimedAt > 1500, { what: 'time passing' })
      await releaseWebhookClaims(store)
      expect(mine(await claimMessages(store, 'restarted', 10, 60_000))).toHaveLength(1)
      const attempt = await db
        .selectFrom('webhook_attempts')
        .select('started_at')
        .where('message_id', '=', message.id)
        .executeTakeFirstOrThrow()
      const started = new Date(attempt.started_at as unknown as string).getTime()
      expect(Math.abs(started - claimedAt)).toBeLessThan(1000)
    })
  })
}
