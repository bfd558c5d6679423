import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { testDb } from '../src/store/test-access.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// Answering a decision with edits (docs/guides/commands-and-decisions.md#edit-or-respond): `edit`
// approves with changed params (checked against the command's schema, recorded in the envelope, and the
// model told what ran); `respond` does not run the command and gives the model the person's text.
const compose = (title: string) => ({
  turns: [{ toolCalls: [{ name: 'rdm__draft__compose', arguments: { title, body: 'b' } }] }, { text: 'Done.' }],
})

for (const engine of apiEngines()) {
  describe(`decisions answered with edits (${engine})`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let projectId: string

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, {
        plugins: ['rdm'],
        models: [
          new ScriptedModel({ id: 'editor', ...compose('Notes') }),
          new ScriptedModel({ id: 'responder', ...compose('Minutes') }),
        ],
      })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'edits' } })).body
        .id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    /** A run whose model calls rdm.draft.compose (high risk): it waits for a decision. */
    const waitingRun = async (model: string) => {
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'write it up', model },
      })
      const waiting = await waitForRun(server, alice.token, created.body.id as string, ['requires_action'])
      const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!
        .decisionId
      return { conversationId, runId: created.body.id as string, decisionId }
    }
    const toolMessage = async (conversationId: string) =>
      JSON.parse(
        (
          await testDb(store)
            .selectFrom('messages')
            .select('content')
            .where('conversation_id', '=', conversationId)
            .where('role', '=', 'tool')
            .executeTakeFirstOrThrow()
        ).content!,
      ) as Record<string, unknown>

    it('edit: refuses params that fail the schema, then runs with the person’s params and tells the model', async () => {
      const { conversationId, runId, decisionId } = await waitingRun('editor')
      const bad = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'edit', params: { title: 'Edited', body: 'b', surprise: true } },
      })
      expect(bad.status).toBe(400)
      expect(bad.body).toMatchObject({ code: 'validation_failed', detail: expect.stringMatching(/surprise|unknown/) })
      const missing = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'edit' },
      })
      expect(missing.status).toBe(400)
      expect((await server.request('GET', `/api/decisions/${decisionId}`, { token: alice.token })).body.status).toBe(
        'pending',
      )

      const edited = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'edit', params: { title: 'Edited title', body: 'b' } },
      })
      expect(edited.status).toBe(200)
      expect(edited.body.decision).toMatchObject({
        status: 'approved',
        reply: { kind: 'edit', params: { title: 'Edited title', body: 'b' } },
      })
      expect(edited.body.dispatch.status).toBe('succeeded')
      await waitForRun(server, alice.token, runId, ['completed'])
      // What ran: the person's title.
      const titles = await testDb(store)
        .selectFrom('knowledge_items')
        .select('title')
        .where('project_id', '=', projectId)
        .execute()
      expect(titles.map((row) => row.title)).toContain('Edited title')
      expect(titles.map((row) => row.title)).not.toContain('Notes')
      // The model read that a person changed the arguments, and what they ran with.
      expect(await toolMessage(conversationId)).toMatchObject({
        editedByPerson: true,
        ranWith: { title: 'Edited title', body: 'b' },
        outcome: expect.any(Object),
      })
      // The envelope records the edit: the params it ran with, and the decision's reply.
      const audit = await server.request('GET', `/api/audit?conversationId=${conversationId}`, { token: alice.token })
      const envelope = (audit.body.items as Array<Record<string, unknown>>).find(
        (item) => item.commandId === 'rdm.draft.compose',
      )
      expect(envelope).toMatchObject({
        status: 'succeeded',
        params: { title: 'Edited title' },
        decision: { outcome: 'approved', via: 'human', reply: 'edit' },
      })
      expect((envelope!.history as Array<{ step: string }>).map((entry) => entry.step)).toEqual([
        'requested',
        'awaiting_decision',
        'decided',
        'running',
        'finished',
      ])
      // An edit is an approval: a second answer that differs conflicts.
      const again = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'respond', text: 'no' },
      })
      expect(again.status).toBe(409)
      // So does an edit with other params, or a plain approve: the person who sent it must not be told
      // it was taken. The same edit again is the stored answer.
      for (const body of [
        { decision: 'edit', params: { title: 'Another title', body: 'b' } },
        { decision: 'approve' },
      ]) {
        const other = await server.request('POST', `/api/decisions/${decisionId}`, { token: alice.token, body })
        expect([other.status, other.body.code], JSON.stringify(body)).toEqual([409, 'decision_conflict'])
      }
      const same = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'edit', params: { body: 'b', title: 'Edited title' } },
      })
      expect(same.status).toBe(200)
    })

    it('respond: the command does not run; the model gets the person’s text as the result', async () => {
      const { conversationId, runId, decisionId } = await waitingRun('responder')
      const empty = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'respond' },
      })
      expect(empty.status).toBe(400)
      const answered = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'respond', text: 'Use the minutes template instead.' },
      })
      expect(answered.status).toBe(200)
      expect(answered.body.decision).toMatchObject({
        status: 'rejected',
        reply: { kind: 'respond', text: 'Use the minutes template instead.' },
      })
      expect(answered.body.dispatch.status).toBe('rejected')
      const run = await waitForRun(server, alice.token, runId, ['completed'])
      expect(run.status).toBe('completed')
      expect(await toolMessage(conversationId)).toEqual({
        accepted: false,
        response: 'Use the minutes template instead.',
      })
      const titles = await testDb(store)
        .selectFrom('knowledge_items')
        .select('title')
        .where('project_id', '=', projectId)
        .execute()
      expect(titles.map((row) => row.title)).not.toContain('Minutes')
      const otherText = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'respond', text: 'Something else.' },
      })
      expect([otherText.status, otherText.body.code]).toEqual([409, 'decision_conflict'])
      const sameText = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'respond', text: 'Use the minutes template instead.' },
      })
      expect(sameText.status).toBe(200)
    })
  })
}
