import { readFile } from 'node:fs/promises'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ask, plinthClient } from '../examples/typed-client.js'
import { typesFile, typesOf } from '../scripts/openapi.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer } from './helpers/test-server.js'

type Operation = {
  operationId?: string
  tags?: string[]
  summary?: string
  requestBody?: { content: Record<string, { schema?: unknown }> }
  responses: Record<string, { content?: Record<string, { schema?: { $ref?: string } }> }>
}

// The OpenAPI document is complete enough to generate a typed client from it, and the committed types
// (plinth/openapi) are the ones the server's document generates.
describe('typed OpenAPI', () => {
  let store: Store
  let server: TestServer
  let document: { paths: Record<string, Record<string, Operation>>; components: { schemas: Record<string, unknown> } }
  const operations = (): Array<[string, string, Operation]> =>
    Object.entries(document.paths).flatMap(([path, methods]) =>
      Object.entries(methods).map(([method, operation]): [string, string, Operation] => [
        method.toUpperCase(),
        path,
        operation,
      ]),
    )

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, { adminToken: 'openapi-admin-token-0123456789' })
    document = (await server.request('GET', '/docs/json')).body
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('gives every operation a unique operationId, a tag, a summary and a typed success answer', () => {
    const ids = new Set<string>()
    for (const [method, path, operation] of operations()) {
      const where = `${method} ${path}`
      expect(operation.operationId, where).toMatch(/^[a-z][A-Za-z]+$/)
      expect(ids.has(operation.operationId!), `${where}: duplicate operationId`).toBe(false)
      ids.add(operation.operationId!)
      expect(operation.tags?.length, where).toBeGreaterThan(0)
      expect(operation.summary, where).toBeTruthy()
      const success = Object.entries(operation.responses).filter(([status]) => status.startsWith('2'))
      expect(success.length, `${where}: no 2xx answer`).toBeGreaterThan(0)
      for (const [status, answer] of success) {
        for (const [type, media] of Object.entries(answer.content ?? {})) {
          // Downloads are bytes; metrics are text; everything else names its schema.
          if (type === 'application/octet-stream' || type.startsWith('text/plain')) continue
          expect(media.schema, `${where} ${status} ${type}`).toBeTruthy()
          expect(media.schema, `${where} ${status} ${type}`).not.toEqual({})
        }
      }
      if (['POST', 'PUT', 'PATCH'].includes(method) && operation.requestBody) {
        for (const [type, media] of Object.entries(operation.requestBody.content))
          expect(media.schema, `${where} body ${type}`).toBeTruthy()
      }
    }
    expect(ids.size).toBeGreaterThan(50)
  })

  it('documents the SSE routes as text/event-stream with their frames', () => {
    const streams = operations().filter(([, path]) => path.endsWith('/events'))
    expect(streams.map(([, path]) => path).sort()).toEqual([
      '/api/conversations/{id}/events',
      '/api/projects/{id}/events',
      '/api/runs/{id}/events',
    ])
    for (const [, path, operation] of streams) {
      const frames = operation.responses['200']?.content?.['text/event-stream']?.schema?.$ref
      expect(frames, path).toBe(
        path.startsWith('/api/runs') ? '#/components/schemas/RunStreamEvent' : '#/components/schemas/StreamEvent',
      )
    }
    // createRun: one JSON body per status (a typed client reads status and messages of either without
    // narrowing), and its stream as a separate media type of the 201.
    const createRun = document.paths['/api/conversations/{id}/runs']!.post!
    expect(createRun.responses['201']!.content).toEqual({
      'application/json': { schema: { $ref: '#/components/schemas/RunWithMessages' } },
      'text/event-stream': { schema: { $ref: '#/components/schemas/RunStreamEvent' } },
    })
    expect(createRun.responses['202']!.content).toEqual({
      'application/json': { schema: { $ref: '#/components/schemas/RunWithMessages' } },
    })
    const runFrames = JSON.stringify(document.components.schemas.RunStreamEvent)
    for (const event of [
      'run.created',
      'message.delta',
      'tool_call.completed',
      'decision.required',
      'run.completed',
      'run.failed',
      'access_revoked',
      'reconnect',
      'shutdown',
    ])
      expect(runFrames).toContain(`"enum":["${event}"]`)
    for (const name of [
      'Project',
      'Conversation',
      'Message',
      'Run',
      'RunWithMessages',
      'RequiredAction',
      'Decision',
      'Command',
      'KnowledgeItem',
      'SearchHit',
      'AuditEnvelope',
      'ModelParams',
      'Problem',
    ]) {
      expect(document.components.schemas, name).toHaveProperty(name)
    }
  })

  it('documents the search modes as an enum with what each does', () => {
    for (const path of ['/api/projects/{id}/search', '/api/search']) {
      const parameters = (
        document.paths[path]!.get as unknown as {
          parameters: Array<{
            name: string
            in: string
            description?: string
            schema: { enum?: string[]; default?: string; description?: string }
          }>
        }
      ).parameters
      const mode = parameters.find((parameter) => parameter.name === 'mode' && parameter.in === 'query')!
      expect(mode.schema, path).toMatchObject({ enum: ['hybrid', 'fulltext', 'vector'], default: 'hybrid' })
      expect(mode.description ?? mode.schema.description, path).toMatch(
        /`hybrid` \(default\).*`fulltext`.*`vector`.*knowledge\.minSimilarity/s,
      )
    }
  })

  it('generates the committed TypeScript types (plinth/openapi); npm run openapi refreshes them', async () => {
    const generated = await typesOf(document as unknown as Record<string, unknown>)
    const committed = await readFile(typesFile, 'utf8')
    // A readable failure: which declaration differs, not a 6,000-line diff.
    if (generated !== committed) {
      const a = generated.split('\n')
      const b = committed.split('\n')
      const line = a.findIndex((text, index) => text !== b[index])
      throw new Error(
        `openapi/plinth-api.d.ts is stale (first difference at line ${line + 1}: ${JSON.stringify(a[line])} vs ${JSON.stringify(b[line])}); run npm run openapi`,
      )
    }
  })

  it('a client typed by those types (examples/typed-client.ts, type-checked by npm test) works against the server', async () => {
    const user = await server.createUser()
    const client = plinthClient(server.url, user.token)
    const { project, run, answer, messages } = await ask(client, 'Which projects do I have?')
    expect(project).toMatchObject({
      name: 'typed client',
      systemPrompt: 'Answer briefly.',
      modelParams: { temperature: 0.1 },
    })
    expect(run).toMatchObject({ status: 'completed', modelParams: { temperature: 0.1 } })
    expect(messages.map((message) => message.role)).toEqual(['user', 'assistant', 'tool', 'assistant'])
    expect(answer).toBeTruthy()
    const refused = await client.POST('/api/projects', { body: { name: '' } })
    expect(refused.response.status).toBe(400)
    expect(refused.error).toMatchObject({ code: 'validation_failed' })
  })
})
