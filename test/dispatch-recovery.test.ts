import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { settledRunStatuses, waitForRun } from './helpers/waits.js'
import { testDb } from '../src/store/test-access.js'

// A dispatch a crash left `running` is ended `interrupted` (with its audit entry), and
// a replay of its Idempotency-Key answers that instead of 409 for ever.
for (const engine of testEngines()) {
  describe(`a dispatch interrupted by a crash, on ${engine}`, () => {
    let store: Store
    let server: TestServer | undefined
    let alice: TestUser

    beforeAll(async () => {
      store = await openTestStore(engine)
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    it('is ended interrupted by the next server (or, on shared Postgres, once its executor lease has passed)', async () => {
      server = await startTestServer(store, { plugins: ['rdm'] })
      alice = await server.createUser()
      const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'crash' } }))
        .body.id
      const dispatch = (key: string) =>
        server!.request('POST', '/api/commands/rdm.ping', {
          token: alice.token,
          headers: { 'idempotency-key': key },
          body: { entrance: 'button', projectId, params: { target: 'db' } },
        })
      const first = await dispatch('crash-key-1')
      expect(first.status).toBe(200)
      const dispatchId = first.body.dispatchId as string
      // What a crash mid-handler leaves behind: the dispatch still running, its executor gone.
      await testDb(store)
        .updateTable('dispatches')
        .set({
          status: 'running',
          result: null,
          executor: 'a-dead-instance',
          executor_expires_at: new Date(Date.now() - 60_000),
        })
        .where('id', '=', dispatchId)
        .execute()
      const stuck = await dispatch('crash-key-1')
      expect(stuck.status).toBe(409)
      expect(stuck.body.code).toBe('dispatch_in_progress')

      // A restart (on Postgres: any instance's sweeper) ends it.
      await server.close()
      server = await startTestServer(store, { plugins: ['rdm'] })
      const row = await testDb(store)
        .selectFrom('dispatches')
        .select(['status', 'error'])
        .where('id', '=', dispatchId)
        .executeTakeFirstOrThrow()
      expect(row).toMatchObject({ status: 'failed', error: { code: 'interrupted' } })
      const steps = await testDb(store)
        .selectFrom('audit_log')
        .select(['step', 'envelope'])
        .where('dispatch_id', '=', dispatchId)
        .orderBy('id')
        .execute()
      expect(steps.at(-1)).toMatchObject({
        step: 'interrupted',
        envelope: { status: 'failed', error: { code: 'interrupted' } },
      })
      const replay = await dispatch('crash-key-1')
      expect(replay.status).toBe(502)
      expect(replay.body).toMatchObject({ code: 'command_interrupted', dispatchId })
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
    })

    // Found by the kill matrix: a crash while an approved command ran left its run waiting for ever.
    it('an approved command cut off by a crash: its call is answered interrupted and the run continues', async () => {
      const model = () =>
        new ScriptedModel({
          id: 'scripted',
          turnBy: 'round',
          turns: [
            { toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'T', body: 'b' } }] },
            { text: 'went on' },
          ],
        })
      await server?.close()
      server = await startTestServer(store, { plugins: ['rdm'], models: [model()] })
      const bob = await server.createUser()
      const projectId = (
        await server.request('POST', '/api/projects', { token: bob.token, body: { name: 'approved-crash' } })
      ).body.id
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: bob.token, body: {} })
      ).body.id
      const run = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
        token: bob.token,
        body: { input: 'write' },
      })
      expect(run.body.status).toBe('requires_action')
      const decisionId = run.body.requiredAction.decisions[0].decisionId as string
      const bobId = (await server.request('GET', '/api/me', { token: bob.token })).body.id as string
      await server.close()
      // What a crash in the approved handler leaves: the decision approved, its dispatch running on a
      // dead executor, the run still waiting with the call awaiting its decision.
      const decision = await testDb(store)
        .selectFrom('decisions')
        .select('dispatch_id')
        .where('id', '=', decisionId)
        .executeTakeFirstOrThrow()
      await testDb(store)
        .updateTable('decisions')
        .set({ status: 'approved', scope: 'once', decided_by: bobId, decided_at: new Date() })
        .where('id', '=', decisionId)
        .execute()
      await testDb(store)
        .updateTable('dispatches')
        .set({ status: 'running', executor: 'a-dead-instance', executor_expires_at: new Date(Date.now() - 60_000) })
        .where('id', '=', decision.dispatch_id)
        .execute()

      server = await startTestServer(store, { plugins: ['rdm'], models: [model()] })
      const after = await waitForRun(server, bob.token, run.body.id, settledRunStatuses)
      expect(after.status).toBe('completed')
      const messages = (
        await server.request('GET', `/api/conversations/${conversationId}/messages`, { token: bob.token })
      ).body.items
      const tool = messages.find((message: { role: string }) => message.role === 'tool')
      expect(JSON.parse(tool.content)).toMatchObject({ error: { code: 'interrupted' } })
      const calls = await testDb(store)
        .selectFrom('run_tool_calls')
        .select('status')
        .where('run_id', '=', run.body.id)
        .execute()
      expect(calls).toEqual([{ status: 'interrupted' }])
      expect(messages.at(-1)).toMatchObject({ role: 'assistant', content: 'went on' })
    })

    // Also found by the kill matrix: a crash between the approval's commit and the command's start.
    it('an approved command that never started (a crash right after the approval): answered interrupted, the run continues', async () => {
      const model = () =>
        new ScriptedModel({
          id: 'scripted',
          turnBy: 'round',
          turns: [
            { toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'T', body: 'b' } }] },
            { text: 'went on' },
          ],
        })
      await server?.close()
      server = await startTestServer(store, { plugins: ['rdm'], models: [model()] })
      const carol = await server.createUser()
      const projectId = (
        await server.request('POST', '/api/projects', { token: carol.token, body: { name: 'approved-unstarted' } })
      ).body.id
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: carol.token, body: {} })
      ).body.id
      const run = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
        token: carol.token,
        body: { input: 'write' },
      })
      expect(run.body.status).toBe('requires_action')
      const decisionId = run.body.requiredAction.decisions[0].decisionId as string
      const carolId = (await server.request('GET', '/api/me', { token: carol.token })).body.id as string
      await server.close()
      // The approval committed (the decision approved, its dispatch still awaiting it), then the process died.
      const decision = await testDb(store)
        .selectFrom('decisions')
        .select('dispatch_id')
        .where('id', '=', decisionId)
        .executeTakeFirstOrThrow()
      await testDb(store)
        .updateTable('decisions')
        .set({ status: 'approved', scope: 'once', decided_by: carolId, decided_at: new Date(Date.now() - 60_000) })
        .where('id', '=', decisionId)
        .execute()
      await testDb(store)
        .updateTable('dispatches')
        .set({ updated_at: new Date(Date.now() - 60_000) })
        .where('id', '=', decision.dispatch_id)
        .execute()

      server = await startTestServer(store, { plugins: ['rdm'], models: [model()] })
      const after = await waitForRun(server, carol.token, run.body.id, settledRunStatuses)
      expect(after.status).toBe('completed')
      const calls = await testDb(store)
        .selectFrom('run_tool_calls')
        .select(['status', 'output'])
        .where('run_id', '=', run.body.id)
        .execute()
      expect(calls).toEqual([
        {
          status: 'interrupted',
          output: {
            error: expect.objectContaining({ code: 'interrupted', message: expect.stringMatching(/did not run/) }),
          },
        },
      ])
      const dispatch = await testDb(store)
        .selectFrom('dispatches')
        .select(['status', 'error'])
        .where('id', '=', decision.dispatch_id)
        .executeTakeFirstOrThrow()
      expect(dispatch).toMatchObject({ status: 'failed', error: { code: 'interrupted' } })
    })

    it('leaves a dispatch whose executor is alive alone', async () => {
      const projectId = (
        await server!.request('POST', '/api/projects', { token: alice.token, body: { name: 'alive' } })
      ).body.id
      const done = await server!.request('POST', '/api/commands/rdm.ping', {
        token: alice.token,
        body: { entrance: 'button', projectId, params: { target: 'x' } },
      })
      await testDb(store)
        .updateTable('dispatches')
        .set({
          status: 'running',
          executor: 'another-live-instance',
          executor_expires_at: new Date(Date.now() + 60_000),
        })
        .where('id', '=', done.body.dispatchId)
        .execute()
      await server!.close()
      server = await startTestServer(store, { plugins: ['rdm'] })
      const row = await testDb(store)
        .selectFrom('dispatches')
        .select('status')
        .where('id', '=', done.body.dispatchId)
        .executeTakeFirstOrThrow()
      // On the embedded database this process is the only one: nothing else can be running it.
      expect(row.status).toBe(engine === 'pglite' ? 'failed' : 'running')
    })
  })
}
