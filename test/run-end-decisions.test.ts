import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import { ledgerViolations } from './helpers/ledger.js'
import { openSse, type SseEvent } from './helpers/sse-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// A run that ends while a decision waits expires the decision in the transaction that ends it, before
// its terminal event: the run's own stream, which closes after that event, shows the decision's end.
for (const engine of apiEngines()) {
  describe(`a waiting run's end on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let projectId: string
    const scripted = new ScriptedModel({ id: 'scripted', turns: [] })

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { plugins: ['rdm'], models: [scripted] })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'p' } })).body.id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    async function waitingRun(): Promise<{ conversationId: string; runId: string; decisionId: string }> {
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      scripted.setTurns([{ toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'T', body: 'b' } }] }])
      const runId = (
        await server.request('POST', `/api/conversations/${conversationId}/runs`, {
          token: alice.token,
          body: { input: 'draft it' },
        })
      ).body.id as string
      const waiting = await waitForRun(server, alice.token, runId, ['requires_action'])
      const required = waiting.requiredAction as { decisions: Array<{ decisionId: string }> }
      const decisionId = required.decisions[0]!.decisionId
      return { conversationId, runId, decisionId }
    }

    /** The run's whole stream, replayed from its start once it has ended. */
    async function runStream(runId: string): Promise<SseEvent[]> {
      const stream = await openSse(`${server.url}/api/runs/${runId}/events`, { token: alice.token })
      await stream.ended
      return stream.events
    }

    function expectResolvedBeforeEnd(events: SseEvent[], decisionId: string, terminal: string): void {
      const names = events.map((event) => event.event)
      const resolved = events.findIndex(
        (event) => event.event === 'decision.resolved' && event.data.decisionId === decisionId,
      )
      expect(resolved, names.join(', ')).toBeGreaterThanOrEqual(0)
      expect(events[resolved]!.data.outcome).toBe('expired')
      expect(names.at(-1)).toBe(terminal)
      expect(resolved).toBeLessThan(names.indexOf(terminal))
    }

    it('cancelled: decision.resolved (expired) comes before run.cancelled on the run stream', async () => {
      const { runId, decisionId } = await waitingRun()
      const cancelled = await server.request('POST', `/api/runs/${runId}/cancel`, { token: alice.token })
      expect(cancelled.body.status).toBe('cancelled')
      expectResolvedBeforeEnd(await runStream(runId), decisionId, 'run.cancelled')
      const decision = await server.request('GET', `/api/decisions?status=pending`, { token: alice.token })
      expect(decision.body.items.map((item: { id: string }) => item.id)).not.toContain(decisionId)
      // The call's audit says what ended it: the run was cancelled, not a deadline.
      const audit = await server.request('GET', `/api/audit?commandId=rdm.draft.compose`, { token: alice.token })
      const envelope = (audit.body.items as Array<{ runId: string; status: string; error: unknown }>).find(
        (item) => item.runId === runId,
      )
      expect(envelope).toMatchObject({
        status: 'cancelled',
        error: { code: 'cancelled', message: expect.stringMatching(/run ended .*before anyone answered/) },
      })
      expect(await ledgerViolations(store)).toEqual([])
    })

    it('superseded by an interrupting message: the same order', async () => {
      const { conversationId, runId, decisionId } = await waitingRun()
      scripted.setTurns([{ text: 'fine' }])
      const next = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'never mind', ifActive: 'interrupt' },
      })
      expect(next.status).toBe(201)
      expectResolvedBeforeEnd(await runStream(runId), decisionId, 'run.cancelled')
      await waitForRun(server, alice.token, next.body.id, ['completed'])
      expect(await ledgerViolations(store)).toEqual([])
    })
  })
}
