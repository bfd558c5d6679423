import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openStore } from '../src/store/index.js'
import { http, lastLine, runPlinth, startServe } from './helpers/cli-process.js'

// The flow of the README: rdm.ping from a button, rdm.draft.compose from a card approved by a
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
      const ping = await http(server.url, 'POST', '/api/commands/rdm.ping', { token, body: { entrance: 'button', projectId: project.body.id } })
      expect(ping.status).toBe(200)
      const card = await http(server.url, 'POST', '/api/commands/rdm.draft.compose', { token, body: { entrance: 'card', projectId: project.body.id, params: { title: 'T', body: 'B' } } })
      expect(card.status).toBe(202)
      const approved = await http(server.url, 'POST', `/api/decisions/${card.body.decision.id}`, { token, body: { decision: 'approve' } })
      expect(approved.body.dispatch.status).toBe('succeeded')
    } finally {
      expect(await server.stop()).toBe(0)
    }

    const intact = await runPlinth(['audit', 'verify'], { cwd })
    expect(intact.code).toBe(0)
    expect(intact.stdout).toMatch(/audit chain intact: 8 entries verified/)

    const store = await openStore({ dataDir: join(cwd, 'data') })
    await sql`update audit_log set envelope = jsonb_set(envelope, '{params}', '{"title":"forged"}') where id = 5`.execute(store.db)
    await store.close()
    const broken = await runPlinth(['audit', 'verify'], { cwd })
    expect(broken.code).toBe(1)
    expect(broken.stderr).toMatch(/audit chain broken at entry 5: .*altered/)
  })
})
