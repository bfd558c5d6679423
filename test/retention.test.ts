import { access } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { verifyAuditChain } from '../src/cmdbus/index.js'
import { ScriptedModel } from '../src/llm/index.js'
import { kvSet, type Store } from '../src/store/index.js'
import { sql, testDb } from '../src/store/test-access.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { startTestServer, type TestServer } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// Retention (docs/guides/operating.md#retention): the sweeper deletes, in batches, events of runs ended
// long ago, the content of conversations idle long enough, settled dispatches, stale knowledge drafts,
// and the audit log's oldest entries (leaving a signed checkpoint `plinth audit verify` starts from). A
// project's own periods apply where shorter than the server's. "Long ago" is made by moving dates back.
const day = 86_400_000
const ago = (days: number) => sql<Date>`${new Date(Date.now() - days * day).toISOString()}::timestamptz`
const adminToken = 'admin-secret-0123456789'
const secretKey = 'retention-secret-key-0123456789'

for (const engine of testEngines()) {
  describe(`retention (${engine})`, () => {
    let store: Store
    let server: TestServer
    let alice: { token: string }

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, {
        models: [
          new ScriptedModel({ id: 'quick', turns: [{ text: 'Kept in the transcript.' }], whenExhausted: 'loop' }),
        ],
        plugins: ['rdm'],
        adminToken,
        secretKey,
        retention: {
          runEventsDays: 7,
          idleConversationDays: 30,
          dispatchDays: 30,
          knowledgeDraftDays: 30,
          auditDays: 90,
        },
      })
      alice = await server.createUser()
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const newProject = async (body: object = {}) => {
      const answer = await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'r', ...body } })
      expect(answer.status).toBe(201)
      return answer.body.id as string
    }
    const runIn = async (projectId: string) => {
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      const run = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'hello', model: 'quick' },
      })
      await waitForRun(server, alice.token, run.body.id as string, ['completed'])
      return { conversationId, runId: run.body.id as string }
    }
    const count = async (table: 'events' | 'messages' | 'run_tool_calls', column: string, value: string) =>
      Number(
        (
          await sql<{
            n: string
          }>`select count(*) as n from ${sql.table(table)} where ${sql.ref(column)} = ${value}`.execute(testDb(store))
        ).rows[0]!.n,
      )
    const endRunAt = (runId: string, when: ReturnType<typeof ago>) =>
      testDb(store).updateTable('runs').set({ ended_at: when }).where('id', '=', runId).execute()

    it("deletes an old run's events, keeps the run and its messages, and leaves recent runs alone", async () => {
      const projectId = await newProject()
      const old = await runIn(projectId)
      const recent = await runIn(projectId)
      expect(await count('events', 'run_id', old.runId)).toBeGreaterThan(3)
      // The old run ended eight days ago; one of its events is still to be rendered by a webhook.
      await endRunAt(old.runId, ago(8))
      const pending = await testDb(store)
        .selectFrom('events')
        .select('id')
        .where('run_id', '=', old.runId)
        .where('type', '=', 'run.completed')
        .executeTakeFirstOrThrow()
      const hook = await server.request('POST', `/api/projects/${projectId}/webhooks`, {
        token: alice.token,
        body: { url: 'https://hooks.example.com/plinth', events: ['run.completed'] },
      })
      expect(hook.status).toBe(201)
      await testDb(store)
        .insertInto('webhook_messages')
        .values({ webhook_id: hook.body.id as string, event_id: pending.id, event_type: 'run.completed' })
        .execute()
      const recentBefore = await count('events', 'run_id', recent.runId)

      const report = await server.runs.sweepRetention()
      expect(report.runEvents).toBeGreaterThan(0)
      expect(await count('events', 'run_id', old.runId)).toBe(1) // the webhook's, until its first attempt renders it
      expect(await count('events', 'run_id', recent.runId)).toBe(recentBefore)
      // The run and its transcript are all there.
      expect((await server.request('GET', `/api/runs/${old.runId}`, { token: alice.token })).body).toMatchObject({
        status: 'completed',
      })
      const messages = await server.request('GET', `/api/conversations/${old.conversationId}/messages`, {
        token: alice.token,
      })
      expect(messages.body.items.map((message: { content: string }) => message.content)).toEqual([
        'hello',
        'Kept in the transcript.',
      ])
      // A second sweep has nothing more to do.
      expect((await server.runs.sweepRetention()).runEvents).toBe(0)
      await testDb(store).deleteFrom('webhook_messages').where('event_id', '=', pending.id).execute()
    })

    it("applies a project's own retention where it is shorter than the server's", async () => {
      const strict = await newProject({ retention: { runEventsDays: 1 } })
      const lax = await newProject()
      const patched = await server.request('PATCH', `/api/projects/${lax}`, {
        token: alice.token,
        body: { retention: { runEventsDays: 30 } },
      })
      expect(patched.status).toBe(200)
      expect(patched.body.retention).toEqual({ runEventsDays: 30 })
      const plain = await newProject()
      const bad = await server.request('PATCH', `/api/projects/${plain}`, {
        token: alice.token,
        body: { retention: { runEventsDays: -1 } },
      })
      expect(bad.status).toBe(400)
      expect(bad.body.code).toBe('validation_failed')
      expect((await server.request('GET', `/api/projects/${plain}`, { token: alice.token })).body.retention).toBe(null)

      // A member who may write to the project may not change what it deletes.
      const bob = await server.createUser()
      await kvSet(store, 'rdm', `members:${plain}`, [bob.user.id])
      const byMember = await server.request('PATCH', `/api/projects/${plain}`, {
        token: bob.token,
        body: { retention: { runEventsDays: 1 } },
      })
      expect(byMember.status).toBe(403)
      expect(byMember.body.code).toBe('forbidden')
      // Nor what the owner's runs spend, nor whether members' items reach the owner's prompts.
      for (const body of [{ budget: { daily: { maxTokens: 1 } } }, { injectMemberKnowledge: true }]) {
        const refused = await server.request('PATCH', `/api/projects/${plain}`, { token: bob.token, body })
        expect([refused.status, refused.body.code], JSON.stringify(body)).toEqual([403, 'forbidden'])
      }

      const inStrict = await runIn(strict)
      const inLax = await runIn(lax)
      const inPlain = await runIn(plain)
      await endRunAt(inStrict.runId, ago(2)) // past the project's 1 day
      await endRunAt(inLax.runId, ago(8)) // past the server's 7: a project cannot keep more
      await endRunAt(inPlain.runId, ago(2)) // within the server's 7
      const plainEvents = await count('events', 'run_id', inPlain.runId)

      await server.runs.sweepRetention()
      expect(await count('events', 'run_id', inStrict.runId)).toBe(0)
      expect(await count('events', 'run_id', inLax.runId)).toBe(0)
      expect(await count('events', 'run_id', inPlain.runId)).toBe(plainEvents)
    })

    it('purges a conversation idle past idleConversationDays: its transcript, events and files; its usage stays', async () => {
      const projectId = await newProject()
      const idle = await runIn(projectId)
      const busy = await runIn(projectId)
      const upload = await server.request('PUT', `/api/conversations/${idle.conversationId}/files/notes/plan.txt`, {
        token: alice.token,
        rawBody: 'the plan',
        headers: { 'content-type': 'text/plain' },
      })
      expect(upload.status).toBeLessThan(300)
      const workDir = join(server.dataDir, 'work', idle.conversationId)
      await access(workDir)
      const usageBefore = await server.request('GET', `/api/usage?projectId=${projectId}`, { token: alice.token })
      // Both conversations are 40 days old; the busy one had a message yesterday.
      for (const { conversationId, runId } of [idle, busy]) {
        await testDb(store)
          .updateTable('conversations')
          .set({ updated_at: ago(40) })
          .where('id', '=', conversationId)
          .execute()
        await sql`update messages set created_at = ${ago(40)} where conversation_id = ${conversationId}`.execute(
          testDb(store),
        )
        await sql`update runs set created_at = ${ago(40)}, ended_at = ${ago(40)} where id = ${runId}`.execute(
          testDb(store),
        )
      }
      await sql`update messages set created_at = ${ago(1)}
                where conversation_id = ${busy.conversationId} and role = 'user'`.execute(testDb(store))

      const report = await server.runs.sweepRetention()
      expect(report.conversations).toBe(1)
      expect(
        (await server.request('GET', `/api/conversations/${idle.conversationId}`, { token: alice.token })).status,
      ).toBe(404)
      expect(await count('messages', 'conversation_id', idle.conversationId)).toBe(0)
      expect(await count('run_tool_calls', 'run_id', idle.runId)).toBe(0)
      // What is left of it: the deletion event its streams see.
      const left = await testDb(store)
        .selectFrom('events')
        .select(['type', 'data'])
        .where('conversation_id', '=', idle.conversationId)
        .execute()
      expect(left).toEqual([
        { type: 'conversation.deleted', data: { conversationId: idle.conversationId, reason: 'retention' } },
      ])
      await expect(access(workDir)).rejects.toMatchObject({ code: 'ENOENT' })
      // Its run is no longer listed (it could not be opened); the other conversation's is.
      const listed = (await server.request('GET', '/api/runs?limit=200', { token: alice.token })).body.items.map(
        (run: { id: string }) => run.id,
      )
      expect(listed).toContain(busy.runId)
      expect(listed).not.toContain(idle.runId)
      // Usage (and so the period budgets) still counts its model calls.
      const usageAfter = await server.request('GET', `/api/usage?projectId=${projectId}`, { token: alice.token })
      expect(usageAfter.body).toEqual(usageBefore.body)
      // The other one is untouched, and a second sweep purges nothing more.
      expect(await count('messages', 'conversation_id', busy.conversationId)).toBe(2)
      expect((await server.runs.sweepRetention()).conversations).toBe(0)
    })

    it('leaves the files of a deleted conversation, and an idle one, while a resumed run of it still goes', async () => {
      const projectId = await newProject()
      const { conversationId, runId } = await runIn(projectId)
      const upload = await server.request('PUT', `/api/conversations/${conversationId}/files/keep.txt`, {
        token: alice.token,
        rawBody: 'still needed',
        headers: { 'content-type': 'text/plain' },
      })
      expect(upload.status).toBeLessThan(300)
      // What a run resumed after it failed looks like: going again, its first end still recorded.
      await sql`update runs set status = 'running', ended_at = ${ago(40)}, created_at = ${ago(40)} where id = ${runId}`.execute(
        testDb(store),
      )
      await sql`update conversations set updated_at = ${ago(40)}, deleted_at = now() where id = ${conversationId}`.execute(
        testDb(store),
      )
      await sql`update messages set created_at = ${ago(40)} where conversation_id = ${conversationId}`.execute(
        testDb(store),
      )
      const report = await server.runs.sweepRetention()
      expect([report.conversations, report.deletedConversationFiles]).toEqual([0, 0])
      await access(join(server.dataDir, 'work', conversationId, 'keep.txt'))
      await sql`update runs set status = 'failed' where id = ${runId}`.execute(testDb(store))
    })

    it('deletes settled dispatches and stale knowledge drafts; their audit entries stay', async () => {
      const projectId = await newProject()
      const ping = await server.request('POST', '/api/commands/rdm.ping', {
        token: alice.token,
        body: { entrance: 'button', projectId },
      })
      expect(ping.status).toBe(200)
      const dispatchId = ping.body.dispatchId as string
      const entries = async () =>
        (await testDb(store).selectFrom('audit_log').select('id').where('dispatch_id', '=', dispatchId).execute())
          .length
      const entriesBefore = await entries()
      expect(entriesBefore).toBeGreaterThan(0)
      const knowledge = async (title: string) => {
        const item = await server.request('POST', `/api/projects/${projectId}/knowledge`, {
          token: alice.token,
          body: { title, text: `${title}: a short note about retention.` },
        })
        expect(item.status).toBeLessThan(300)
        return item.body.id as string
      }
      const staleDraft = await knowledge('stale')
      const freshDraft = await knowledge('fresh')
      await testDb(store)
        .updateTable('dispatches')
        .set({ updated_at: ago(31) })
        .where('id', '=', dispatchId)
        .execute()
      await testDb(store)
        .updateTable('knowledge_items')
        .set({ updated_at: ago(31) })
        .where('id', '=', staleDraft)
        .execute()

      const report = await server.runs.sweepRetention()
      expect(report.dispatches).toBe(1)
      expect(report.knowledgeItems).toBe(1)
      expect(await testDb(store).selectFrom('dispatches').select('id').where('id', '=', dispatchId).execute()).toEqual(
        [],
      )
      expect(await entries()).toBe(entriesBefore)
      const items = await testDb(store)
        .selectFrom('knowledge_items')
        .select('id')
        .where('id', 'in', [staleDraft, freshDraft])
        .execute()
      expect(items).toEqual([{ id: freshDraft }])
      expect(
        await testDb(store).selectFrom('knowledge_chunks').select('id').where('item_id', '=', staleDraft).execute(),
      ).toEqual([])
    })

    it('removes the oldest audit entries under a signed checkpoint that verification starts from', async () => {
      const projectId = await newProject()
      for (let index = 0; index < 3; index++)
        await server.request('POST', '/api/commands/rdm.ping', {
          token: alice.token,
          body: { entrance: 'button', projectId },
        })
      const ids = (await testDb(store).selectFrom('audit_log').select('id').orderBy('id').execute()).map((row) =>
        Number(row.id),
      )
      expect(ids.length).toBeGreaterThan(4)
      // Everything but the last two entries is past the server's 90 days.
      const kept = ids.slice(-2)
      const through = ids.at(-3)!
      await sql`update audit_log set created_at = ${ago(100)} where id <= ${through}`.execute(testDb(store))

      const report = await server.runs.sweepRetention()
      expect(report.auditEntries).toBe(ids.length - 2)
      expect(
        (await testDb(store).selectFrom('audit_log').select('id').orderBy('id').execute()).map((row) => Number(row.id)),
      ).toEqual(kept)
      const verdict = await server.request('GET', '/api/admin/audit/verify', { token: adminToken })
      expect(verdict.body).toMatchObject({ ok: true, checked: 2, checkpoint: { throughId: through } })

      // New entries keep chaining on.
      await server.request('POST', '/api/commands/rdm.ping', {
        token: alice.token,
        body: { entrance: 'button', projectId },
      })
      const entries = Number(
        (await sql<{ n: string }>`select count(*) as n from audit_log`.execute(testDb(store))).rows[0]!.n,
      )
      expect(entries).toBeGreaterThan(2)
      expect(await verifyAuditChain(store, { secretKey })).toMatchObject({ ok: true, checked: entries })
      // Without the key the checkpoint cannot be trusted; a forged checkpoint or a removed entry is named.
      expect(await verifyAuditChain(store)).toMatchObject({
        ok: false,
        firstBad: { id: through, reason: expect.stringMatching(/secretKey/) },
      })
      await sql`update audit_checkpoints set removed = removed + 1`.execute(testDb(store))
      expect(await verifyAuditChain(store, { secretKey })).toMatchObject({
        ok: false,
        firstBad: { id: through, reason: expect.stringMatching(/signature/) },
      })
      await sql`update audit_checkpoints set removed = removed - 1`.execute(testDb(store))
      await testDb(store).deleteFrom('audit_log').where('id', '=', String(kept[0])).execute()
      expect(await verifyAuditChain(store, { secretKey })).toMatchObject({
        ok: false,
        firstBad: { id: kept[1], reason: expect.stringMatching(/does not link/) },
      })
    })
  })
}
