import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openStore } from '../src/store/index.js'
import { http, lastLine, runPlinth, startServe } from './helpers/cli-process.js'
import { sql, testDb } from '../src/store/test-access.js'

// The flow of docs/guides/commands-and-decisions.md: rdm.ping from a button, rdm.draft.compose from a card approved by a
// human, then `plinth audit verify` passes — and fails once an entry is altered in the database.
describe('plinth audit verify', () => {
  let cwd: string
  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-audit-'))
  })
  afterAll(async () => rm(cwd, { recursive: true, force: true }))

  it('passes on an intact chain and names the first altered entry', { timeout: 240_000 }, async () => {
    const env = { PLINTH_PLUGINS: 'rdm' }
    const created = await runPlinth(['users', 'create', 'alice'], { cwd, env })
    expect(created.code).toBe(0)
    const token = lastLine(created.stdout)
    const server = await startServe({ cwd, env })
    try {
      const project = await http(server.url, 'POST', '/api/projects', { token, body: { name: 'audited' } })
      const ping = await http(server.url, 'POST', '/api/commands/rdm.ping', {
        token,
        body: { entrance: 'button', projectId: project.body.id },
      })
      expect(ping.status).toBe(200)
      const card = await http(server.url, 'POST', '/api/commands/rdm.draft.compose', {
        token,
        body: { entrance: 'card', projectId: project.body.id, params: { title: 'T', body: 'B' } },
      })
      expect(card.status).toBe(202)
      const approved = await http(server.url, 'POST', `/api/decisions/${card.body.decision.id}`, {
        token,
        body: { decision: 'approve' },
      })
      expect(approved.body.dispatch.status).toBe('succeeded')
    } finally {
      expect(await server.stop()).toBe(0)
    }

    const intact = await runPlinth(['audit', 'verify'], { cwd })
    expect(intact.code).toBe(0)
    expect(intact.stdout).toMatch(/audit chain intact: 8 entries verified/)

    const store = await openStore({ dataDir: join(cwd, 'data') })
    await sql`update audit_log set envelope = jsonb_set(envelope, '{params}', '{"title":"forged"}') where id = 5`.execute(
      testDb(store),
    )
    await store.close()
    const broken = await runPlinth(['audit', 'verify'], { cwd })
    expect(broken.code).toBe(1)
    expect(broken.stderr).toMatch(/audit chain broken at entry 5: .*altered/)
  })

  it('verifies through the admin API of a server that holds the embedded database', { timeout: 240_000 }, async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plinth-audit-live-'))
    const env = { PLINTH_PLUGINS: 'rdm', PLINTH_ADMIN_TOKEN: 'admin-secret-0123456789' }
    try {
      const token = lastLine((await runPlinth(['users', 'create', 'alice'], { cwd: dir, env })).stdout)
      const server = await startServe({ cwd: dir, env })
      try {
        const project = await http(server.url, 'POST', '/api/projects', { token, body: { name: 'audited' } })
        expect(
          (
            await http(server.url, 'POST', '/api/commands/rdm.ping', {
              token,
              body: { entrance: 'button', projectId: project.body.id },
            })
          ).status,
        ).toBe(200)
        const intact = await runPlinth(['audit', 'verify'], { cwd: dir, env })
        expect(intact.code, intact.stderr).toBe(0)
        expect(intact.stderr).toMatch(/the server at .* holds the database: using its admin API/)
        expect(intact.stdout).toMatch(/audit chain intact: \d+ entries verified/)
        // Without the admin token the lock error says how to proceed.
        const refused = await runPlinth(['audit', 'verify'], { cwd: dir, env: { PLINTH_PLUGINS: 'rdm' } })
        expect(refused.code).toBe(1)
        expect(refused.stderr).toMatch(/set PLINTH_ADMIN_TOKEN/)
      } finally {
        expect(await server.stop()).toBe(0)
      }
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
  it(
    'verifies from the signed checkpoint retention leaves when it removes the oldest entries',
    { timeout: 240_000 },
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'plinth-audit-retention-'))
      const env = { PLINTH_PLUGINS: 'rdm', PLINTH_ADMIN_TOKEN: 'admin-secret-0123456789' }
      const retention = {
        ...env,
        PLINTH_SECRET_KEY: 'retention-secret-key-0123456789',
        PLINTH_RETENTION_AUDIT_DAYS: '30',
      }
      try {
        const token = lastLine((await runPlinth(['users', 'create', 'alice'], { cwd: dir, env })).stdout)
        const first = await startServe({ cwd: dir, env })
        try {
          const project = await http(first.url, 'POST', '/api/projects', { token, body: { name: 'audited' } })
          for (let index = 0; index < 2; index++)
            await http(first.url, 'POST', '/api/commands/rdm.ping', {
              token,
              body: { entrance: 'button', projectId: project.body.id },
            })
        } finally {
          expect(await first.stop()).toBe(0)
        }
        // Every entry but the newest is 40 days old.
        const store = await openStore({ dataDir: join(dir, 'data') })
        await sql`update audit_log set created_at = now() - interval '40 days'
                where id < (select max(id) from audit_log)`.execute(testDb(store))
        await store.close()
        // The server sweeps at start.
        const second = await startServe({ cwd: dir, env: retention })
        try {
          const deadline = Date.now() + 60_000
          for (;;) {
            const verdict = await http(second.url, 'GET', '/api/admin/audit/verify', { token: env.PLINTH_ADMIN_TOKEN })
            if (verdict.body.checkpoint) {
              expect(verdict.body).toMatchObject({ ok: true, checked: 1 })
              break
            }
            if (Date.now() > deadline) throw new Error('the retention sweep left no checkpoint')
            await new Promise((resolve) => setTimeout(resolve, 200))
          }
        } finally {
          expect(await second.stop()).toBe(0)
        }
        const intact = await runPlinth(['audit', 'verify'], { cwd: dir, env: retention })
        expect(intact.code, intact.stderr).toBe(0)
        expect(intact.stdout).toMatch(
          /audit chain intact: 1 entries verified from the retention checkpoint after entry \d+/,
        )
        const keyless = await runPlinth(['audit', 'verify'], { cwd: dir, env })
        expect(keyless.code).toBe(1)
        expect(keyless.stderr).toMatch(/audit chain broken at entry \d+: .*secretKey/)
      } finally {
        await rm(dir, { recursive: true, force: true })
      }
    },
  )
})
