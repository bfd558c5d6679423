import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { readOnlyShares } from './__fixtures__/plugins/read-only-share.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { settledRunStatuses, waitForRun } from './helpers/waits.js'
import { testDb } from '../src/store/test-access.js'

const settled = (server: TestServer, token: string, runId: string) =>
  waitForRun(server, token, runId, settledRunStatuses)

// What runs do with modes and client tools is audited, operator keywords count,
// client tools cannot pose as command tools, and the model is offered only what the owner may use.
describe('runs: audit, risk keywords, client tools, tool list', () => {
  let store: Store
  let server: TestServer
  let alice: TestUser
  let bob: TestUser
  let projectId: string
  const model = new ScriptedModel({ id: 'scripted', turns: [] })
  const sharePlugin = new URL('./__fixtures__/plugins/read-only-share.ts', import.meta.url).pathname
  const slowPlugin = new URL('./__fixtures__/plugins/slow-tool.ts', import.meta.url).pathname

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      plugins: [slowPlugin, sharePlugin],
      models: [model],
      highRiskKeywords: ['deploy-prod'],
    })
    alice = await server.createUser()
    bob = await server.createUser()
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'audited' } })).body
      .id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  const conversation = async (token = alice.token, project = projectId): Promise<string> =>
    (await server.request('POST', `/api/projects/${project}/conversations`, { token, body: {} })).body.id

  it('switching a conversation to full mode is audited (core.set_permission_mode, who and when)', async () => {
    const conversationId = await conversation()
    const patched = await server.request('PATCH', `/api/conversations/${conversationId}`, {
      token: alice.token,
      body: { permissionMode: 'full', title: 'yolo' },
    })
    expect(patched.status).toBe(200)
    expect(patched.body).toMatchObject({ permissionMode: 'full', title: 'yolo' })
    expect(patched.body.modeExpiresAt).toEqual(expect.any(String))
    const audit = await server.request(
      'GET',
      `/api/audit?commandId=core.set_permission_mode&conversationId=${conversationId}`,
      { token: alice.token },
    )
    expect(audit.body.items).toHaveLength(1)
    expect(audit.body.items[0]).toMatchObject({
      status: 'succeeded',
      params: { mode: 'full' },
      actor: { type: 'user', id: alice.user.id },
      conversationId,
    })
    // Setting the same mode again changes nothing and records nothing.
    await server.request('PATCH', `/api/conversations/${conversationId}`, {
      token: alice.token,
      body: { permissionMode: 'full' },
    })
    expect(
      (
        await server.request('GET', `/api/audit?commandId=core.set_permission_mode&conversationId=${conversationId}`, {
          token: alice.token,
        })
      ).body.items,
    ).toHaveLength(1)
  })

  it('operator high-risk keywords make a proposed command high risk, naming the rule', async () => {
    model.setTurns([
      { toolCalls: [{ name: 'propose_command', arguments: { command: 'make deploy-prod' } }] },
      { text: 'ok' },
    ])
    const conversationId = await conversation()
    const run = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: { input: 'ship it', clientTools: ['propose_command'] },
    })
    expect(run.status).toBe(201)
    await settled(server, alice.token, run.body.id)
    const created = await testDb(store)
      .selectFrom('events')
      .select('data')
      .where('run_id', '=', run.body.id)
      .where('type', '=', 'tool_call.created')
      .executeTakeFirstOrThrow()
    expect(created.data).toMatchObject({
      risk: 'high',
      matchedRules: [expect.objectContaining({ id: expect.stringContaining('deploy-prod') })],
    })
    await server.request('POST', `/api/runs/${run.body.id}/cancel`, { token: alice.token })
  })

  it('a client tool call has an audit row (entrance agent, kind client) from the hand-over to its answer', async () => {
    model.setTurns([{ toolCalls: [{ name: 'propose_command', arguments: { command: 'ls -la' } }] }, { text: 'listed' }])
    const conversationId = await conversation()
    const run = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: { input: 'list', clientTools: ['propose_command'] },
    })
    const waiting = await settled(server, alice.token, run.body.id)
    const callId = (waiting.requiredAction as { toolOutputs: Array<{ callId: string }> }).toolOutputs[0]!.callId
    const before = await server.request(
      'GET',
      `/api/audit?commandId=propose_command&conversationId=${conversationId}`,
      { token: alice.token },
    )
    expect(before.body.items).toHaveLength(1)
    expect(before.body.items[0]).toMatchObject({
      entrance: 'agent',
      kind: 'client',
      status: 'requested',
      runId: run.body.id,
      callId,
      actor: { type: 'agent', id: run.body.id, onBehalfOf: alice.user.id },
    })
    await server.request('POST', `/api/runs/${run.body.id}/tool-outputs`, {
      token: alice.token,
      body: { outputs: [{ callId, output: { accepted: true, exitCode: 0 } }] },
    })
    expect((await settled(server, alice.token, run.body.id)).status).toBe('completed')
    const after = await server.request('GET', `/api/audit?commandId=propose_command&conversationId=${conversationId}`, {
      token: alice.token,
    })
    expect(after.body.items[0]).toMatchObject({
      status: 'succeeded',
      kind: 'client',
      result: { accepted: true, exitCode: 0 },
    })
  })

  it('a client tool call with unparsable arguments counts as rejected, and its audit says it was never handed over', async () => {
    model.setTurns([{ toolCalls: [{ name: 'propose_command', arguments: '{nope' }] }, { text: 'understood' }])
    const conversationId = await conversation()
    const run = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: { input: 'list', clientTools: ['propose_command'] },
    })
    expect((await settled(server, alice.token, run.body.id)).status).toBe('completed')
    const calls = await testDb(store)
      .selectFrom('run_tool_calls')
      .select(['status', 'output'])
      .where('run_id', '=', run.body.id)
      .execute()
    expect(calls).toEqual([
      {
        status: 'rejected',
        output: { accepted: false, rejected: true, error: expect.objectContaining({ code: 'invalid_arguments' }) },
      },
    ])
    const audit = await server.request('GET', `/api/audit?commandId=propose_command&conversationId=${conversationId}`, {
      token: alice.token,
    })
    expect(audit.body.items[0]).toMatchObject({
      status: 'rejected',
      kind: 'client',
      error: { code: 'invalid_arguments', message: expect.stringMatching(/^not handed to the client/) },
    })
  })

  it('a client tool named like a command tool is refused at run creation (422 client_tool_conflict)', async () => {
    const conversationId = await conversation()
    const answer = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: {
        input: 'x',
        clientTools: [
          { name: 'slow__wait', description: 'not the real one', parameters: { type: 'object', properties: {} } },
        ],
      },
    })
    expect(answer.status).toBe(422)
    expect(answer.body.code).toBe('client_tool_conflict')
    expect(answer.body.detail).toMatch(/slow\.wait/)
  })

  it('a command result over PLINTH_RESULT_MAX_BYTES is refused (502 result_too_large), not stored', async () => {
    const small = await server.request('POST', '/api/commands/slow.big', {
      token: alice.token,
      body: { entrance: 'button', projectId, params: { bytes: 1000 } },
    })
    expect(small.status).toBe(200)
    const big = await server.request('POST', '/api/commands/slow.big', {
      token: alice.token,
      body: { entrance: 'button', projectId, params: { bytes: 2 * 1024 * 1024 } },
    })
    expect(big.status).toBe(502)
    expect(big.body.code).toBe('result_too_large')
    const row = await testDb(store)
      .selectFrom('dispatches')
      .select(['status', 'result'])
      .where('id', '=', big.body.dispatchId)
      .executeTakeFirstOrThrow()
    expect(row).toEqual({ status: 'failed', result: null })
  })

  it("a run's model is offered only the tools its owner may use (read-only share: no write commands)", async () => {
    readOnlyShares.set(projectId, new Set([bob.user.id]))
    try {
      model.setTurns([{ text: 'hello' }])
      const own = await server.request('POST', `/api/conversations/${await conversation()}/runs`, {
        token: alice.token,
        body: { input: 'hi' },
      })
      await settled(server, alice.token, own.body.id)
      const ownerTools = model.calls.at(-1)!.tools.map((tool) => tool.name)
      model.setTurns([{ text: 'hello' }])
      const shared = await server.request('POST', `/api/conversations/${await conversation(bob.token)}/runs`, {
        token: bob.token,
        body: { input: 'hi' },
      })
      expect(shared.status).toBe(201)
      await settled(server, bob.token, shared.body.id)
      const readerTools = model.calls.at(-1)!.tools.map((tool) => tool.name)
      // slow.wait is not declared read-only; knowledge_search and list_projects are.
      expect(ownerTools).toEqual(expect.arrayContaining(['slow__wait', 'knowledge_search', 'list_projects']))
      expect(readerTools).toEqual(expect.arrayContaining(['knowledge_search', 'list_projects']))
      expect(readerTools).not.toContain('slow__wait')
    } finally {
      readOnlyShares.delete(projectId)
    }
  })

  it('a reader writing in a project they can see is forbidden (403), not told it is missing (404)', async () => {
    readOnlyShares.set(projectId, new Set([bob.user.id]))
    try {
      expect((await server.request('GET', `/api/projects/${projectId}`, { token: bob.token })).status).toBe(200)
      const command = await server.request('POST', '/api/commands/slow.brief', {
        token: bob.token,
        body: { entrance: 'button', projectId, params: {} },
      })
      expect([command.status, command.body.code]).toEqual([403, 'forbidden'])
      const memory = await server.request('POST', '/api/memories', {
        token: bob.token,
        body: { scope: 'project', projectId, text: 'we ship on Fridays' },
      })
      expect([memory.status, memory.body.code]).toEqual([403, 'forbidden'])
    } finally {
      readOnlyShares.delete(projectId)
    }
    // Once the share is gone, the same project is missing to them.
    const stranger = await server.request('POST', '/api/commands/slow.brief', {
      token: bob.token,
      body: { entrance: 'button', projectId, params: {} },
    })
    expect([stranger.status, stranger.body.code]).toEqual([404, 'not_found'])
  })
})
