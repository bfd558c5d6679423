import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { testDb } from '../src/store/test-access.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import { ledgerViolations } from './helpers/ledger.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitFor, waitForRun } from './helpers/waits.js'

// Deleting a conversation or a project ends its runs: none is left waiting for a decision nobody can
// reach any more (docs/guides/agent-runs.md, "Deleting a conversation or project").
for (const engine of apiEngines()) {
  describe(`deleting on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    const scripted = new ScriptedModel({ id: 'scripted', turns: [] })

    beforeAll(async () => {
      store = await openTestStore(engine)
      const slowPlugin = new URL('./__fixtures__/plugins/slow-tool.ts', import.meta.url).pathname
      server = await startTestServer(store, { plugins: ['rdm', slowPlugin], models: [scripted] })
      alice = await server.createUser()
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const project = async (): Promise<string> =>
      (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'doomed' } })).body.id
    const conversation = async (projectId: string): Promise<string> =>
      (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body
        .id
    const rowsOf = (runIds: string[]) =>
      testDb(store)
        .selectFrom('runs')
        .select(['id', 'status', 'cancel_reason'])
        .where('id', 'in', runIds)
        .orderBy('id')
        .execute()
    const pendingDecisions = async (): Promise<unknown[]> =>
      (await server.request('GET', '/api/decisions?status=pending', { token: alice.token })).body.items

    /** A run waiting for a decision on a confirmed call, and another queued behind it. */
    async function waitingAndQueued(conversationId: string): Promise<{ waiting: string; queued: string }> {
      scripted.setTurns([{ toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'T', body: 'b' } }] }])
      const waiting = (
        await server.request('POST', `/api/conversations/${conversationId}/runs`, {
          token: alice.token,
          body: { input: 'draft it' },
        })
      ).body.id as string
      await waitForRun(server, alice.token, waiting, ['requires_action'])
      const queued = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'and then this', ifActive: 'enqueue' },
      })
      expect(queued.status).toBe(201)
      expect(queued.body.status).toBe('queued')
      return { waiting, queued: queued.body.id as string }
    }

    it('a conversation: its waiting and queued runs end cancelled, its decision can no longer be approved', async () => {
      const conversationId = await conversation(await project())
      const { waiting, queued } = await waitingAndQueued(conversationId)
      const decisionId = (
        (await server.request('GET', `/api/runs/${waiting}`, { token: alice.token })).body.requiredAction
          .decisions as Array<{ decisionId: string }>
      )[0]!.decisionId
      expect(decisionId).toBeTruthy()

      const deleted = await server.request('DELETE', `/api/conversations/${conversationId}`, { token: alice.token })
      expect(deleted.status).toBe(204)

      expect(await rowsOf([waiting, queued])).toEqual(
        [
          { id: waiting, status: 'cancelled', cancel_reason: 'conversation_deleted' },
          { id: queued, status: 'cancelled', cancel_reason: 'conversation_deleted' },
        ].sort((a, b) => (a.id < b.id ? -1 : 1)),
      )
      const listed = await server.request('GET', '/api/runs?status=requires_action', { token: alice.token })
      expect(listed.body.items.map((run: { id: string }) => run.id)).not.toContain(waiting)
      expect(await pendingDecisions()).toEqual([])
      const approved = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { status: 'approved' },
      })
      expect(approved.status).toBeGreaterThanOrEqual(400)
      expect(approved.status).toBeLessThan(500)
      const dispatched = await testDb(store)
        .selectFrom('dispatches')
        .select('status')
        .where('run_id', '=', waiting)
        .execute()
      expect(dispatched.map((row) => row.status)).not.toContain('succeeded')
      expect(await ledgerViolations(store)).toEqual([])
    })

    it('a project: the runs of all its conversations end, a running one included', async () => {
      const projectId = await project()
      const first = await conversation(projectId)
      const second = await conversation(projectId)
      const { waiting, queued } = await waitingAndQueued(first)
      scripted.setTurns([{ toolCalls: [{ name: 'slow__wait', arguments: {} }] }])
      const running = (
        await server.request('POST', `/api/conversations/${second}/runs`, {
          token: alice.token,
          body: { input: 'wait' },
        })
      ).body.id as string
      await waitForRun(server, alice.token, running, (current) => current.phase === 'tool_running')

      const deleted = await server.request('DELETE', `/api/projects/${projectId}`, { token: alice.token })
      expect(deleted.status).toBe(204)

      const ended = await waitFor(
        async () => {
          const rows = await rowsOf([waiting, queued, running])
          return rows.every((row) => row.status === 'cancelled') ? rows : undefined
        },
        { what: 'every run of the deleted project to end' },
      )
      const reasons = Object.fromEntries(ended.map((row) => [row.id, row.cancel_reason]))
      expect(reasons[waiting]).toBe('project_deleted')
      expect(reasons[queued]).toBe('project_deleted')
      // The running run may have been ended first by the access re-check its driver makes.
      expect(['project_deleted', 'access_revoked']).toContain(reasons[running])
      expect(await pendingDecisions()).toEqual([])
      expect(await ledgerViolations(store)).toEqual([])
    })
  })
}
