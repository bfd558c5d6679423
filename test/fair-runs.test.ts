import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// Regression (docs/security.md#fair-model-slots): one user could hold every model slot — a victim's
// one-turn run waited 13.6 s behind another user's 20 slow runs.
describe('model time is shared fairly between users', () => {
  let store: Store
  let server: TestServer
  let attacker: TestUser
  let victim: TestUser

  beforeAll(async () => {
    store = await openTestStore('pglite')
    // Each turn takes about 2 s (10 chunks, 200 ms apart); two model calls at a time, one per user.
    const slow = new ScriptedModel({
      id: 'slow',
      turns: [{ text: 'a b c d e f g h i j', chunks: 10, delayMs: 200 }],
      whenExhausted: 'loop',
    })
    server = await startTestServer(store, { models: [slow], llmConcurrency: 2, maxActiveRunsPerUser: 5 })
    attacker = await server.createUser()
    victim = await server.createUser()
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  const conversationOf = async (user: TestUser): Promise<string> => {
    const project = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'p' } })).body.id
    return (await server.request('POST', `/api/projects/${project}/conversations`, { token: user.token, body: {} }))
      .body.id
  }
  const startIn = async (
    user: TestUser,
    conversation?: string,
  ): Promise<{ status: number; body: { id: string; code?: string } }> =>
    server.request('POST', `/api/conversations/${conversation ?? (await conversationOf(user))}/runs`, {
      token: user.token,
      body: { input: 'go' },
    })
  const statusOf = async (user: TestUser, runId: string): Promise<string> =>
    (await server.request('GET', `/api/runs/${runId}`, { token: user.token })).body.status

  it('a user’s runs take at most their share of the model, and past a cap more are refused 429 too_many_runs', async () => {
    // The conversations first: on a loaded machine their set-up could outlast the first run's turn,
    // which would free a place under the cap before the sixth run is asked for.
    const conversations = await Promise.all(Array.from({ length: 6 }, () => conversationOf(attacker)))
    const attackerRuns: string[] = []
    for (const conversation of conversations.slice(0, 5)) {
      const started = await startIn(attacker, conversation)
      expect(started.status).toBe(201)
      attackerRuns.push(started.body.id)
    }
    const refused = await startIn(attacker, conversations[5])
    expect([refused.status, refused.body.code]).toEqual([429, 'too_many_runs'])

    // The victim's run gets the free slot at once: it ends while the attacker's queue is still going.
    const started = performance.now()
    const mine = await startIn(victim)
    expect(mine.status).toBe(201)
    await waitForRun(server, victim.token, mine.body.id, ['completed'], 60_000)
    const waited = performance.now() - started
    const stillGoing = (await Promise.all(attackerRuns.map((id) => statusOf(attacker, id)))).filter(
      (status) => status === 'running',
    ).length
    console.log(
      `[fair] the victim's run completed in ${Math.round(waited)} ms with ${stillGoing} of the attacker's 5 runs still running`,
    )
    expect(stillGoing).toBeGreaterThanOrEqual(3)
    for (const id of attackerRuns) await server.request('POST', `/api/runs/${id}/cancel`, { token: attacker.token })
  })
})
