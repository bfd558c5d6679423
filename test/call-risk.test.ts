import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { openSse } from './helpers/sse-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitFor, waitForRun } from './helpers/waits.js'

// Clients see a call's evaluated risk (low|medium|high), never how it is decided; the catalog says
// `varies` with the range where a classifier decides (docs/guides/commands-and-decisions.md).
const classified = new URL('./__fixtures__/plugins/classified.ts', import.meta.url).pathname

describe('risk on the wire', () => {
  let store: Store
  let server: TestServer
  let model: ScriptedModel
  let alice: TestUser
  let conversationId: string

  beforeAll(async () => {
    store = await openTestStore('pglite')
    model = new ScriptedModel({ id: 'scripted', turns: [] })
    server = await startTestServer(store, { models: [model], plugins: [classified], exec: { backend: 'direct' } })
    alice = await server.createUser()
    const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'risk' } }))
      .body.id
    conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('a call shows the level its classifier gives these arguments, in tool_call.created and requiredAction', async () => {
    model.setTurns([
      {
        toolCalls: [
          { name: 'classified__touch', arguments: { path: '/etc/hosts' } },
          { name: 'classified__touch', arguments: { path: 'notes.txt' } },
        ],
      },
      { text: 'done' },
    ])
    const stream = await openSse(`${server.url}/api/conversations/${conversationId}/events`, { token: alice.token })
    const run = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: { input: 'touch', knowledge: { autoInject: false } },
    })
    const waiting = await waitForRun(
      server,
      alice.token,
      run.body.id,
      ['requires_action', 'completed', 'failed'],
      30_000,
    )
    expect(waiting.status).toBe('requires_action')
    const decisions = (waiting.requiredAction as { decisions: Array<{ risk: string; args: { path: string } }> })
      .decisions
    expect(decisions.map((decision) => [decision.args.path, decision.risk])).toEqual([['/etc/hosts', 'high']])
    const createdEvents = () => stream.events.filter((event) => event.event === 'tool_call.created')
    await waitFor(() => createdEvents().length >= 2, { what: 'two tool_call.created events' })
    stream.close()
    const risks = createdEvents()
      .filter((event) => event.event === 'tool_call.created')
      .map((event) => [event.data.args.path, event.data.risk])
    expect(risks).toEqual([
      ['/etc/hosts', 'high'],
      ['notes.txt', 'low'],
    ])
    // The decision itself carries the same level (GET /api/decisions/:id).
    const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!.decisionId
    const decision = await server.request('GET', `/api/decisions/${decisionId}`, { token: alice.token })
    expect(decision.status).toBe(200)
    expect(decision.body).toMatchObject({
      id: decisionId,
      commandId: 'classified.touch',
      risk: 'high',
      status: 'pending',
      params: { path: '/etc/hosts' },
    })
    const stranger = await server.createUser()
    expect((await server.request('GET', `/api/decisions/${decisionId}`, { token: stranger.token })).status).toBe(404)
  })

  it('a call that waits for a person starts after the decision: created, decision.required, then started once approved', async () => {
    model.setTurns([{ toolCalls: [{ name: 'classified__touch', arguments: { path: '/etc/motd' } }] }, { text: 'done' }])
    const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'order' } }))
      .body.id
    const conversation = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    const stream = await openSse(`${server.url}/api/conversations/${conversation}/events`, { token: alice.token })
    const run = await server.request('POST', `/api/conversations/${conversation}/runs`, {
      token: alice.token,
      body: { input: 'touch motd', knowledge: { autoInject: false } },
    })
    const waiting = await waitForRun(server, alice.token, run.body.id, ['requires_action'], 30_000)
    const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!.decisionId
    expect(
      (
        await server.request('POST', `/api/decisions/${decisionId}`, {
          token: alice.token,
          body: { decision: 'approve' },
        })
      ).status,
    ).toBe(200)
    await waitForRun(server, alice.token, run.body.id, ['completed'], 30_000)
    const ofThisRun = () =>
      stream.events.filter(
        (event) =>
          ['tool_call.created', 'decision.required', 'tool_call.started', 'tool_call.completed'].includes(
            event.event ?? '',
          ) &&
          (event.data.runId === run.body.id || event.data.callId !== undefined),
      )
    await stream.waitForEvent((event) => ofThisRun().includes(event) && event.event === 'tool_call.completed', {
      what: "the run's tool_call.completed",
    })
    stream.close()
    const callId = ofThisRun().find((event) => event.event === 'tool_call.created' && event.data.runId === run.body.id)!
      .data.callId
    const order = ofThisRun()
      .filter((event) => event.data.callId === callId)
      .map((event) => event.event)
    expect(order).toEqual(['tool_call.created', 'decision.required', 'tool_call.started', 'tool_call.completed'])
  })

  it('in risky mode, once a person rejected a call, the run’s later medium calls ask; the next run starts afresh', async () => {
    const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'rej' } }))
      .body.id
    const conversation = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    expect(
      (
        await server.request('PATCH', `/api/conversations/${conversation}`, {
          token: alice.token,
          body: { permissionMode: 'risky' },
        })
      ).status,
    ).toBe(200)
    const decisionsOf = (run: Record<string, unknown>) =>
      (run.requiredAction as { decisions: Array<{ decisionId: string; risk: string; args: { path: string } }> })
        .decisions
    const toolResults = async (runId: string) =>
      (
        await server.request('GET', `/api/conversations/${conversation}/messages?limit=100`, { token: alice.token })
      ).body.items.filter(
        (message: { runId: string; role: string }) => message.runId === runId && message.role === 'tool',
      )

    // A medium call in risky mode runs without asking.
    model.setTurns([{ toolCalls: [{ name: 'classified__touch', arguments: { path: '/tmp/a' } }] }, { text: 'done' }])
    const first = await server.request('POST', `/api/conversations/${conversation}/runs`, {
      token: alice.token,
      body: { input: 'touch /tmp/a', knowledge: { autoInject: false } },
    })
    expect(
      (await waitForRun(server, alice.token, first.body.id, ['completed', 'requires_action'], 30_000)).status,
    ).toBe('completed')

    // A high call asks; the person rejects it; the model tries a medium call instead: that asks now.
    model.setTurns([
      { toolCalls: [{ name: 'classified__touch', arguments: { path: '/etc/shadow' } }] },
      { toolCalls: [{ name: 'classified__touch', arguments: { path: '/tmp/../etc/shadow' } }] },
      { text: 'gave up' },
    ])
    const second = await server.request('POST', `/api/conversations/${conversation}/runs`, {
      token: alice.token,
      body: { input: 'touch /etc/shadow', knowledge: { autoInject: false } },
    })
    const asked = await waitForRun(server, alice.token, second.body.id, ['requires_action', 'completed'], 30_000)
    expect(decisionsOf(asked).map((decision) => decision.risk)).toEqual(['high'])
    const rejected = await server.request('POST', `/api/decisions/${decisionsOf(asked)[0]!.decisionId}`, {
      token: alice.token,
      body: { decision: 'reject' },
    })
    expect(rejected.status).toBe(200)
    const askedAgain = await waitFor(
      async () => {
        const run = (await server.request('GET', `/api/runs/${second.body.id}`, { token: alice.token })).body
        return run.status === 'requires_action' && decisionsOf(run)[0]?.args.path === '/tmp/../etc/shadow'
          ? run
          : run.status === 'completed'
            ? run
            : undefined
      },
      { what: 'the medium call asking, or the run completing', timeoutMs: 30_000 },
    )
    expect(askedAgain.status).toBe('requires_action')
    expect(decisionsOf(askedAgain)).toEqual([expect.objectContaining({ risk: 'medium' })])
    const decision = await server.request('GET', `/api/decisions/${decisionsOf(askedAgain)[0]!.decisionId}`, {
      token: alice.token,
    })
    expect(decision.body.reasons.join(' ')).toMatch(/rejected a call earlier in this run/)
    expect(await toolResults(second.body.id)).toHaveLength(1) // only the rejection's answer so far
    await server.request('POST', `/api/decisions/${decisionsOf(askedAgain)[0]!.decisionId}`, {
      token: alice.token,
      body: { decision: 'reject' },
    })
    await waitForRun(server, alice.token, second.body.id, ['completed'], 30_000)

    // The next run starts afresh: its medium call runs without asking.
    model.setTurns([{ toolCalls: [{ name: 'classified__touch', arguments: { path: '/tmp/b' } }] }, { text: 'done' }])
    const third = await server.request('POST', `/api/conversations/${conversation}/runs`, {
      token: alice.token,
      body: { input: 'touch /tmp/b', knowledge: { autoInject: false } },
    })
    expect(
      (await waitForRun(server, alice.token, third.body.id, ['completed', 'requires_action'], 30_000)).status,
    ).toBe('completed')
  })

  it('in risky mode, a declined propose_command counts as a rejection: the run’s later medium calls ask', async () => {
    const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'decl' } }))
      .body.id
    const conversation = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    await server.request('PATCH', `/api/conversations/${conversation}`, {
      token: alice.token,
      body: { permissionMode: 'risky' },
    })
    model.setTurns([
      { toolCalls: [{ name: 'propose_command', arguments: { command: 'rm -rf build', reason: 'clean up' } }] },
      { toolCalls: [{ name: 'classified__touch', arguments: { path: '/tmp/instead' } }] },
      { text: 'gave up' },
    ])
    const run = await server.request('POST', `/api/conversations/${conversation}/runs`, {
      token: alice.token,
      body: { input: 'clean up', clientTools: ['propose_command'], knowledge: { autoInject: false } },
    })
    expect(run.status).toBe(201)
    const proposed = await waitForRun(server, alice.token, run.body.id, ['requires_action'], 30_000)
    const callId = (proposed.requiredAction as { toolOutputs: Array<{ callId: string }> }).toolOutputs[0]!.callId
    const declined = await server.request('POST', `/api/runs/${run.body.id}/tool-outputs`, {
      token: alice.token,
      body: { outputs: [{ callId, output: { accepted: false } }] },
    })
    expect(declined.status).toBe(200)
    const asked = await waitForRun(
      server,
      alice.token,
      run.body.id,
      (current) =>
        current.status === 'completed' ||
        ((current.requiredAction as { decisions?: unknown[] } | null)?.decisions?.length ?? 0) > 0,
      30_000,
    )
    expect(asked.status).toBe('requires_action')
    expect((asked.requiredAction as { decisions: Array<{ risk: string }> }).decisions).toEqual([
      expect.objectContaining({ risk: 'medium' }),
    ])
    await server.request('POST', `/api/runs/${run.body.id}/cancel`, { token: alice.token })
  })

  it('the catalog shows a static level, or `varies` with the range, never an internal word', async () => {
    const answer = await server.request('GET', '/api/commands', { token: alice.token })
    expect(answer.status).toBe(200)
    const catalog = answer.body.items as Array<{
      id: string
      risk: string
      riskRange: { min: string; max: string } | null
    }>
    const byId = new Map(catalog.map((command) => [command.id, command]))
    expect(byId.get('classified.touch')).toMatchObject({ risk: 'varies', riskRange: { min: 'low', max: 'high' } })
    // Under direct an execution is always high.
    expect(byId.get('core.exec')).toMatchObject({ risk: 'high', riskRange: null })
    expect(byId.get('core.read_file')).toMatchObject({ risk: 'low', riskRange: null })
    for (const command of catalog) expect(['low', 'medium', 'high', 'varies']).toContain(command.risk)
  })
})
