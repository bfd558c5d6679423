import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { startTestServer, type TestServer } from './helpers/test-server.js'
import { sql, testDb } from '../src/store/test-access.js'

// GET /api/admin/audit/verify: the audit chain checked by the running server (no downtime).
for (const engine of testEngines()) {
  describe(`GET /api/admin/audit/verify on ${engine}`, () => {
    const adminToken = 'admin-secret-0123456789'
    let store: Store
    let server: TestServer

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { adminToken, plugins: ['rdm'] })
      const alice = await server.createUser()
      const projectId = (
        await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'audited' } })
      ).body.id
      for (let index = 0; index < 3; index++) {
        expect(
          (
            await server.request('POST', '/api/commands/rdm.ping', {
              token: alice.token,
              body: { entrance: 'button', projectId },
            })
          ).status,
        ).toBe(200)
      }
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    it('is for the admin token only (problem+json for a user token or none)', async () => {
      const user = await server.createUser()
      for (const token of [user.token, undefined]) {
        const answer = await server.request('GET', '/api/admin/audit/verify', token ? { token } : {})
        expect(answer.status).toBe(401)
        expect(answer.headers.get('content-type')).toMatch(/^application\/problem\+json/)
        expect(answer.body.code).toBe('unauthorized')
      }
    })

    it('reports an intact chain, then names the first altered entry', async () => {
      const intact = await server.request('GET', '/api/admin/audit/verify', { token: adminToken })
      expect(intact.status).toBe(200)
      expect(intact.body.ok).toBe(true)
      expect(intact.body.checked).toBeGreaterThanOrEqual(6)
      expect(intact.body.firstBad).toBeUndefined()

      const middle = await testDb(store)
        .selectFrom('audit_log')
        .select('id')
        .orderBy('id')
        .offset(2)
        .limit(1)
        .executeTakeFirstOrThrow()
      await sql`update audit_log set envelope = jsonb_set(envelope, '{status}', '"tampered"') where id = ${middle.id}`.execute(
        testDb(store),
      )
      const broken = await server.request('GET', '/api/admin/audit/verify', { token: adminToken })
      expect(broken.status).toBe(200)
      expect(broken.body).toEqual({
        ok: false,
        checked: 2,
        firstBad: { id: Number(middle.id), reason: expect.stringMatching(/altered/) },
      })
    })
  })
}
