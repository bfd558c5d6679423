import { Writable } from 'node:stream'
import { pino } from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import {
  openaiTextChunks,
  openaiToolCallChunks,
  startFakeUpstream,
  type FakeUpstream,
} from './helpers/fake-upstream.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { testDb } from '../src/store/test-access.js'

const keyVar = 'PLINTH_TEST_PROFILE_KEY'
const missingKeyVar = 'PLINTH_TEST_PROFILE_KEY_THAT_IS_NOT_SET'

// A project's agent profile end to end: stored, validated, audited, and what the upstream receives.
describe('agent profiles', () => {
  let store: Store
  let server: TestServer
  let upstream: FakeUpstream
  let alice: TestUser
  const logLines: string[] = []

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    process.env[keyVar] = 'sk-profile-test-key-0123456789'
    delete process.env[missingKeyVar]
    store = await openTestStore('pglite')
    const logger = pino(
      { level: 'info' },
      new Writable({ write: (chunk, _encoding, done) => done(void logLines.push(String(chunk))) }),
    )
    server = await startTestServer(store, {
      plugins: ['rdm'],
      logger,
      models: [
        // Configured defaults: temperature and a gateway header; the profile and the run override.
        {
          id: 'gpt',
          provider: 'openai',
          model: 'gpt-test',
          baseUrl: `${upstream.url}/v1`,
          apiKeyEnv: keyVar,
          temperature: 0.9,
          maxTokens: 512,
          headers: { 'x-gateway-tenant': 'acme' },
        },
        { id: 'gpt-small', provider: 'openai', model: 'gpt-small', baseUrl: `${upstream.url}/v1`, apiKeyEnv: keyVar },
        {
          id: 'keyless',
          provider: 'openai',
          model: 'gpt-test',
          baseUrl: `${upstream.url}/v1`,
          apiKeyEnv: missingKeyVar,
        },
      ],
    })
    alice = await server.createUser()
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
    await upstream?.close()
    delete process.env[keyVar]
  })

  const newProject = async (body: Record<string, unknown> = {}): Promise<string> => {
    const created = await server.request('POST', '/api/projects', {
      token: alice.token,
      body: { name: 'profiled', ...body },
    })
    expect(created.status, JSON.stringify(created.body)).toBe(201)
    return created.body.id
  }
  const runIn = async (projectId: string, body: Record<string, unknown> = {}) => {
    const conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    const answer = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
      token: alice.token,
      body: { input: 'Is the service up?', ...body },
    })
    expect(answer.status, JSON.stringify(answer.body)).toBe(201)
    return answer.body
  }

  it('lists the configured models a page at a time, in their order', async () => {
    const first = await server.request('GET', '/api/models?limit=2', { token: alice.token })
    expect(first.body.items.map((model: { id: string }) => model.id)).toEqual(['gpt', 'gpt-small'])
    expect(first.body.nextCursor).toEqual(expect.any(String))
    const rest = await server.request('GET', `/api/models?limit=2&cursor=${first.body.nextCursor}`, {
      token: alice.token,
    })
    expect(rest.body).toEqual({ items: [expect.objectContaining({ id: 'keyless' })], nextCursor: null })
    for (const query of ['cursor=abc', 'limit=abc', 'limit=0', 'color=red'])
      expect((await server.request('GET', `/api/models?${query}`, { token: alice.token })).status).toBe(400)
  })

  it('a new project has an empty profile: every exposed tool, the configured default model', async () => {
    const projectId = await newProject()
    const project = (await server.request('GET', `/api/projects/${projectId}`, { token: alice.token })).body
    expect(project).toMatchObject({ systemPrompt: null, defaultModel: null, modelParams: {}, tools: null })
  })

  it('stores and audits the profile; runs use its prompt, model, parameters and tool subset, and a run overrides parameters', async () => {
    const projectId = await newProject()
    const patched = await server.request('PATCH', `/api/projects/${projectId}`, {
      token: alice.token,
      body: {
        systemPrompt: 'You are the Apollo flight controller. Answer in French.',
        defaultModel: 'gpt-small',
        modelParams: { temperature: 0.2, topP: 0.8, stop: ['END'] },
        tools: ['rdm__ping'],
      },
    })
    expect(patched.status, JSON.stringify(patched.body)).toBe(200)
    // Tool names are stored as the command ids they name.
    expect(patched.body).toMatchObject({
      systemPrompt: 'You are the Apollo flight controller. Answer in French.',
      defaultModel: 'gpt-small',
      modelParams: { temperature: 0.2, topP: 0.8, stop: ['END'] },
      tools: ['rdm.ping'],
    })
    expect((await server.request('GET', `/api/projects/${projectId}`, { token: alice.token })).body).toMatchObject({
      tools: ['rdm.ping'],
      defaultModel: 'gpt-small',
    })

    // Audited in the hash-chained log, with who changed what.
    const audit = await testDb(store)
      .selectFrom('audit_log')
      .select(['step', 'envelope', 'project_id'])
      .where('step', '=', 'project:profile')
      .where('project_id', '=', projectId)
      .execute()
    expect(audit).toHaveLength(1)
    expect(audit[0]!.envelope).toMatchObject({
      by: alice.user.id,
      changes: { defaultModel: { from: null, to: 'gpt-small' }, tools: { from: null, to: ['rdm.ping'] } },
    })

    const before = upstream.requests.length
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Oui, tout va bien.', 3) })
    const run = await runIn(projectId)
    expect(run).toMatchObject({
      status: 'completed',
      model: 'gpt-small',
      modelParams: { temperature: 0.2, topP: 0.8, stop: ['END'] },
    })
    const sent = upstream.requests[before]!
    expect(sent.body.model).toBe('gpt-small')
    expect(sent.body).toMatchObject({ temperature: 0.2, top_p: 0.8, stop: ['END'] })
    expect(sent.body.messages[0]).toMatchObject({ role: 'system' })
    expect(sent.body.messages[0].content).toContain('You are the Apollo flight controller. Answer in French.')
    // Only the subset is offered (rdm__draft__compose, list_projects, … are not).
    expect(sent.body.tools.map((tool: { function: { name: string } }) => tool.function.name)).toEqual(['rdm__ping'])

    // A run's parameters win over the project's; the configured defaults fill the rest.
    const next = upstream.requests.length
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Bien.', 2) })
    const overridden = await runIn(projectId, { model: 'gpt', modelParams: { temperature: 0, maxTokens: 64 } })
    expect(overridden).toMatchObject({
      status: 'completed',
      model: 'gpt',
      modelParams: { temperature: 0, maxTokens: 64, topP: 0.8, stop: ['END'] },
    })
    expect(upstream.requests[next]!.body).toMatchObject({
      model: 'gpt-test',
      temperature: 0,
      max_tokens: 64,
      top_p: 0.8,
    })
    expect(upstream.requests[next]!.headers['x-gateway-tenant']).toBe('acme')
  })

  it('a tool outside the subset is refused when the model calls it anyway', async () => {
    const projectId = await newProject({ tools: ['rdm.ping'], defaultModel: 'gpt' })
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: openaiToolCallChunks([
        { id: 'call_x', name: 'rdm__draft__compose', arguments: '{"title":"t","body":"b"}' },
      ]),
    })
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('I may not write drafts here.', 2) })
    const run = await runIn(projectId)
    expect(run.status).toBe('completed')
    const toolMessage = run.messages.find((message: { role: string }) => message.role === 'tool')
    expect(JSON.parse(toolMessage.content)).toMatchObject({ error: { code: 'unknown_tool' } })
    // Not dispatched: a draft would have needed an approval (requires_action) and left an audit envelope.
    expect(
      await testDb(store)
        .selectFrom('dispatches')
        .select('id')
        .where('command_id', '=', 'rdm.draft.compose')
        .where('run_id', '=', run.id)
        .execute(),
    ).toEqual([])
  })

  it('configured defaults apply when the project sets nothing', async () => {
    const projectId = await newProject()
    const before = upstream.requests.length
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Up.', 1) })
    await runIn(projectId, { model: 'gpt' })
    expect(upstream.requests[before]!.body).toMatchObject({ temperature: 0.9, max_tokens: 512 })
    expect(upstream.requests[before]!.body).not.toHaveProperty('top_p')
    expect(upstream.requests[before]!.headers.authorization).toBe(`Bearer ${process.env[keyVar]}`)
  })

  it('a model whose key variable is unset: a warning at start, and runs fail with upstream_auth_missing without calling upstream', async () => {
    const warning = logLines.map((line) => JSON.parse(line)).find((line) => line.id === 'keyless')
    expect(warning).toMatchObject({ level: 40, apiKeyEnv: missingKeyVar })
    expect(warning.msg).toMatch(/upstream_auth_missing/)
    const projectId = await newProject({ defaultModel: 'keyless' })
    const before = upstream.requests.length
    const run = await runIn(projectId)
    expect(run).toMatchObject({ status: 'failed', model: 'keyless', error: { code: 'upstream_auth_missing' } })
    expect(run.error.message).toContain(missingKeyVar)
    expect(upstream.requests.length).toBe(before)
    // No call was made, so none is counted.
    expect(run.usage).toMatchObject({ modelCalls: 0, inputTokens: 0 })
  })

  it('refuses bad profiles: unknown field, temperature out of range, unknown tool, unknown model', async () => {
    const projectId = await newProject()
    const patch = (body: Record<string, unknown>) =>
      server.request('PATCH', `/api/projects/${projectId}`, { token: alice.token, body })

    const unknownField = await patch({ systemPrompt: 'x', persona: 'pirate' })
    expect(unknownField.status).toBe(400)
    expect(unknownField.body).toMatchObject({
      code: 'validation_failed',
      errors: [{ path: 'body.persona', message: 'unknown field' }],
    })

    const unknownParam = await patch({ modelParams: { temprature: 0.5 } })
    expect(unknownParam.status).toBe(400)
    expect(unknownParam.body.errors).toEqual([expect.objectContaining({ path: 'body.modelParams.temprature' })])

    for (const temperature of [-0.1, 2.5]) {
      const answer = await patch({ modelParams: { temperature } })
      expect(answer.status).toBe(400)
      expect(answer.body).toMatchObject({
        code: 'validation_failed',
        errors: [expect.objectContaining({ path: 'body.modelParams.temperature' })],
      })
    }
    expect((await patch({ modelParams: { topP: 0 } })).status).toBe(400)
    expect((await patch({ modelParams: { maxTokens: 0 } })).status).toBe(400)
    expect((await patch({ modelParams: { stop: ['a', 'b', 'c', 'd', 'e'] } })).status).toBe(400)

    const unknownTool = await patch({ tools: ['rdm.ping', 'rdm.launch_missiles'] })
    expect(unknownTool.status).toBe(400)
    expect(unknownTool.body).toMatchObject({
      code: 'validation_failed',
      errors: [{ path: 'body.tools.1', message: 'unknown tool "rdm.launch_missiles"' }],
    })

    const unknownModel = await patch({ defaultModel: 'gpt-9' })
    expect(unknownModel.status).toBe(422)
    expect(unknownModel.body).toMatchObject({ code: 'unknown_model' })

    const badRunParams = await server.request(
      'POST',
      `/api/conversations/${(await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body.id}/runs`,
      {
        token: alice.token,
        body: { input: 'hi', modelParams: { temperature: 3 } },
      },
    )
    expect(badRunParams.status).toBe(400)

    // Nothing of the refused patches was stored, and nothing was audited.
    expect((await server.request('GET', `/api/projects/${projectId}`, { token: alice.token })).body).toMatchObject({
      systemPrompt: null,
      defaultModel: null,
      modelParams: {},
      tools: null,
    })
    expect(
      await testDb(store)
        .selectFrom('audit_log')
        .select('id')
        .where('project_id', '=', projectId)
        .where('step', '=', 'project:profile')
        .execute(),
    ).toEqual([])

    // Clearing: null restores the defaults; [] means no tools at all.
    expect((await patch({ tools: [] })).body.tools).toEqual([])
    expect((await patch({ tools: null, systemPrompt: null })).body).toMatchObject({ tools: null, systemPrompt: null })
    expect(
      (await patch({ modelParams: { temperature: 0.2 }, injectMemberKnowledge: true, memoryRecall: false })).body,
    ).toMatchObject({ modelParams: { temperature: 0.2 }, injectMemberKnowledge: true, memoryRecall: false })
    const reset = await patch({ modelParams: null, injectMemberKnowledge: null, memoryRecall: null })
    expect([reset.status, reset.body]).toEqual([
      200,
      expect.objectContaining({ modelParams: {}, injectMemberKnowledge: false, memoryRecall: true }),
    ])
  })
})
