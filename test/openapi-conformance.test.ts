import { Ajv, type ValidateFunction } from 'ajv'
import addFormatsModule from 'ajv-formats'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { openSse, type SseEvent } from './helpers/sse-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv
const adminToken = 'conformance-admin-token-0123456789'
const someId = '01JZZZZZZZZZZZZZZZZZZZZZZZ'

type Schema = Record<string, unknown>

/** The document as generated clients read it: an object schema without additionalProperties is closed. */
function closedAsTyped(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(closedAsTyped)
  if (node === null || typeof node !== 'object') return node
  const out: Schema = Object.fromEntries(Object.entries(node).map(([key, value]) => [key, closedAsTyped(value)]))
  if (out.type === 'object' && out.properties && !('additionalProperties' in out)) out.additionalProperties = false
  return out
}

// The generated types have no open records for problems, stream frames, runs, decisions and knowledge:
// what the server really sends must fit them exactly (an undocumented field fails here).
describe('answers and stream frames fit the closed OpenAPI schemas', () => {
  let store: Store
  let server: TestServer
  let user: TestUser
  let document: {
    paths: Record<string, Record<string, { requestBody?: { content: Record<string, unknown> } }>>
    components: { schemas: Record<string, Schema> }
  }
  const validators = new Map<string, ValidateFunction>()
  const model = new ScriptedModel({
    id: 'scripted',
    turns: [
      { toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'T', body: 'B' } }] },
      { text: 'Drafted.' },
    ],
  })

  const fits = (name: string, value: unknown): void => {
    let validate = validators.get(name)
    if (!validate) {
      const ajv = addFormats(new Ajv({ strict: false, allErrors: true }))
      validate = ajv.compile({ $ref: `#/components/schemas/${name}`, components: closedAsTyped(document.components) })
      validators.set(name, validate)
    }
    expect(validate(value) ? [] : validate.errors, `${name}: ${JSON.stringify(value).slice(0, 400)}`).toEqual([])
  }

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { plugins: ['rdm'], models: [model], adminToken })
    user = await server.createUser()
    document = (await server.request('GET', '/docs/json')).body
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it(
    'every frame of a project stream and a run stream (knowledge, a decision, tool calls) and the run answers',
    { timeout: 120_000 },
    async () => {
      const project = (
        await server.request('POST', '/api/projects', { token: user.token, body: { name: 'conformance' } })
      ).body
      const stream = await openSse(`${server.url}/api/projects/${project.id}/events`, { token: user.token })
      expect(stream.status).toBe(200)
      const item = await server.request('POST', `/api/projects/${project.id}/knowledge`, {
        token: user.token,
        body: { title: 'Drafting', text: 'Drafts are composed with the draft command.' },
      })
      expect(item.status).toBeLessThan(300)
      fits('KnowledgeItem', item.body)
      await server.request('PATCH', `/api/projects/${project.id}`, {
        token: user.token,
        body: { description: 'changed' },
      })
      const conversation = (
        await server.request('POST', `/api/projects/${project.id}/conversations`, {
          token: user.token,
          body: { title: 'c' },
        })
      ).body
      const created = await server.request('POST', `/api/conversations/${conversation.id}/runs`, {
        token: user.token,
        body: { input: 'draft with the draft command' },
      })
      expect(created.status).toBe(201)
      fits('RunWithMessages', created.body)
      const deadline = Date.now() + 90_000
      let decisions = await server.request('GET', '/api/decisions?status=pending', { token: user.token })
      while (decisions.body.items.length === 0 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 100))
        decisions = await server.request('GET', '/api/decisions?status=pending', { token: user.token })
      }
      expect(decisions.body.items.length).toBeGreaterThan(0)
      for (const decision of decisions.body.items) fits('Decision', decision)
      const answered = await server.request('POST', `/api/decisions/${decisions.body.items[0].id}`, {
        token: user.token,
        body: { decision: 'approve' },
      })
      expect(answered.status).toBe(200)
      fits('Decision', answered.body.decision)
      fits('DispatchState', answered.body.dispatch)
      const search = await server.request('GET', `/api/projects/${project.id}/search?q=draft`, { token: user.token })
      for (const hit of search.body.items) fits('SearchHit', hit)

      const ended = (events: SseEvent[]): boolean =>
        events.some((event) => event.event === 'run.completed' && event.data.runId === created.body.id)
      while (!ended(stream.events) && Date.now() < deadline)
        await stream.waitFor(stream.events.length + 1, deadline - Date.now()).catch(() => undefined)
      stream.close()
      expect(ended(stream.events)).toBe(true)
      const seen = new Set(stream.events.map((event) => event.event))
      for (const event of [
        'project.updated',
        'knowledge.created',
        'conversation.created',
        'run.created',
        'message.delta',
        'tool_call.created',
        'decision.required',
        'decision.resolved',
        'tool_call.completed',
        'run.completed',
      ])
        expect(seen, event).toContain(event)
      for (const event of stream.events) fits('StreamEvent', event)

      const replay = await openSse(`${server.url}/api/runs/${created.body.id}/events`, { token: user.token })
      await replay.ended
      expect(replay.events.at(-1)?.event).toBe('run.completed')
      for (const event of replay.events) fits('RunStreamEvent', event)
    },
  )

  it('problem answers, extensions included', async () => {
    const project = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'problems' } }))
      .body
    const conversation = (
      await server.request('POST', `/api/projects/${project.id}/conversations`, { token: user.token, body: {} })
    ).body
    model.setTurns([{ toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'T', body: 'B' } }] }])
    const run = await server.request('POST', `/api/conversations/${conversation.id}/runs`, {
      token: user.token,
      body: { input: 'draft' },
      headers: { prefer: 'wait=60' },
    })
    expect(run.body.status).toBe('requires_action')
    const active = await server.request('POST', `/api/conversations/${conversation.id}/runs`, {
      token: user.token,
      body: { input: 'more' },
    })
    expect(active.body).toMatchObject({
      code: 'run_active',
      activeRunId: run.body.id,
      activeStatus: 'requires_action',
      awaiting: { decisions: [{ commandId: 'rdm.draft.compose' }] },
    })
    const decisionId = run.body.requiredAction.decisions[0].decisionId
    await server.request('POST', `/api/decisions/${decisionId}`, { token: user.token, body: { decision: 'reject' } })
    const conflict = await server.request('POST', `/api/decisions/${decisionId}`, {
      token: user.token,
      body: { decision: 'approve' },
    })
    expect(conflict.body).toMatchObject({ code: 'decision_conflict', decision: { id: decisionId, status: 'rejected' } })
    const problems = [
      active.body,
      conflict.body,
      (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'x', bogus: 1 } })).body,
      (await server.request('GET', `/api/projects/${someId}`, { token: user.token })).body,
      (await server.request('GET', '/api/projects', {})).body,
    ]
    for (const problem of problems) fits('Problem', problem)
  })

  it('every GET refuses an unknown query field, also where the route takes no query string', async () => {
    const routes = Object.entries(document.paths)
      .filter(([path, methods]) => path.startsWith('/api/') && 'get' in methods)
      .map(([path]) => path)
    expect(routes.length).toBeGreaterThan(20)
    const project = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'query' } })).body
    const conversation = (
      await server.request('POST', `/api/projects/${project.id}/conversations`, { token: user.token, body: {} })
    ).body
    for (const path of routes) {
      const url = path
        .replace('/api/projects/{id}', `/api/projects/${project.id}`)
        .replace('/api/conversations/{id}', `/api/conversations/${conversation.id}`)
        .replace(/\{[^}]+\}/g, someId)
      const answer = await server.request('GET', `${url}?unknownQuery=1`, {
        token: path.startsWith('/api/admin') ? adminToken : user.token,
      })
      expect([path, answer.status, answer.body.code]).toEqual([path, 400, 'validation_failed'])
      expect(answer.body.errors, path).toContainEqual({ path: 'querystring.unknownQuery', message: 'unknown field' })
    }
    // A write too, with a valid body.
    const patched = await server.request('PATCH', `/api/conversations/${conversation.id}?zzz=1`, {
      token: user.token,
      body: { title: 't2' },
    })
    expect([patched.status, patched.body.errors]).toEqual([
      400,
      [{ path: 'querystring.zzz', message: 'unknown field' }],
    ])
  })

  it('every JSON request body refuses an unknown field: 400 validation_failed naming it', async () => {
    const routes = Object.entries(document.paths).flatMap(([path, methods]) =>
      Object.entries(methods)
        .filter(([, operation]) => operation.requestBody?.content['application/json'])
        .map(([method]) => [method.toUpperCase(), path] as const),
    )
    expect(routes.length).toBeGreaterThan(10)
    // Real ids where a route looks its resource up before it reads the body.
    const project = (
      await server.request('POST', '/api/projects', { token: user.token, body: { name: 'unknown fields' } })
    ).body
    const conversation = (
      await server.request('POST', `/api/projects/${project.id}/conversations`, { token: user.token, body: {} })
    ).body
    for (const [method, path] of routes) {
      const url = path
        .replace('/api/projects/{id}', `/api/projects/${project.id}`)
        .replace('/api/conversations/{id}', `/api/conversations/${conversation.id}`)
        .replace('{commandId}', 'rdm.ping')
        .replace(/\{[^}]+\}/g, someId)
      const answer = await server.request(method, url, {
        token: path.startsWith('/api/admin') ? adminToken : user.token,
        body: { unknownField: 1 },
      })
      expect([method, path, answer.status, answer.body.code]).toEqual([method, path, 400, 'validation_failed'])
      expect(answer.body.errors, `${method} ${path}`).toContainEqual({
        path: 'body.unknownField',
        message: 'unknown field',
      })
    }
  })
})
