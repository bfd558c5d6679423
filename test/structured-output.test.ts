import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import {
  fakeOpenAIModel,
  openaiTextChunks,
  openaiToolCallChunks,
  startFakeUpstream,
  type FakeUpstream,
} from './helpers/fake-upstream.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// Structured output (docs/guides/agent-runs.md#structured-output): tools run as usual; the schema applies
// to the final answer only. One that fails validation is asked for again — with what failed, with
// `response_format` and without tools — and the run's `output` holds the parsed object.
const weather = {
  type: 'object',
  properties: { city: { type: 'string' }, celsius: { type: 'number' } },
  required: ['city', 'celsius'],
  additionalProperties: false,
}

for (const engine of apiEngines()) {
  describe(`structured output (${engine})`, () => {
    let store: Store
    let server: TestServer
    let upstream: FakeUpstream
    let alice: TestUser
    let projectId: string

    beforeAll(async () => {
      upstream = await startFakeUpstream()
      store = await openTestStore(engine)
      server = await startTestServer(store, {
        plugins: ['rdm'],
        models: [
          fakeOpenAIModel(upstream, 'wire'),
          new ScriptedModel({ id: 'stubborn', turns: [{ text: 'It is sunny.' }], whenExhausted: 'loop' }),
        ],
      })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'output' } })).body
        .id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
      await upstream?.close()
    })

    const startRun = async (body: Record<string, unknown>) => {
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
      return server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'Weather in Paris?', approvalPolicy: 'dontAsk', ...body },
      })
    }

    it('calls two tools, then answers JSON that fails the schema, then JSON that passes', async () => {
      upstream.clear()
      const before = upstream.requests.length
      upstream.enqueue({
        kind: 'openai-stream',
        chunks: openaiToolCallChunks([{ id: 'c1', name: 'rdm__ping', arguments: '{"target":"Paris"}' }]),
      })
      upstream.enqueue({
        kind: 'openai-stream',
        chunks: openaiToolCallChunks([{ id: 'c2', name: 'rdm__ping', arguments: '{"target":"Lyon"}' }]),
      })
      upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('{"city": "Paris", "celsius": "warm"}', 3) })
      upstream.enqueue({
        kind: 'openai-stream',
        chunks: openaiTextChunks('```json\n{"city":"Paris","celsius":21}\n```', 2),
      })
      const created = await startRun({ model: 'wire', output: { schema: weather, name: 'weather' } })
      expect(created.status).toBe(201)
      expect(created.body.output).toBe(null)
      const run = await waitForRun(server, alice.token, created.body.id as string, ['completed', 'failed'])
      expect(run.status).toBe('completed')
      expect(run.output).toEqual({ city: 'Paris', celsius: 21 })

      // Four calls upstream: only the last carries response_format, and it has no tools.
      const calls = upstream.requests.slice(before).map((request) => request.body)
      expect(calls).toHaveLength(4)
      expect(calls.slice(0, 3).map((body) => body.response_format)).toEqual([undefined, undefined, undefined])
      expect(calls.slice(0, 3).every((body) => Array.isArray(body.tools) && body.tools.length > 0)).toBe(true)
      expect(calls[3].response_format).toEqual({
        type: 'json_schema',
        json_schema: { name: 'weather', schema: weather, strict: false },
      })
      expect(calls[3].tools).toBeUndefined()
      // The model is told what failed.
      const told = calls[3].messages.at(-1)
      expect(told.role).toBe('user')
      expect(told.content).toMatch(/\/celsius must be number/)
      expect(calls[3].messages.at(-2)).toMatchObject({
        role: 'assistant',
        content: '{"city": "Paris", "celsius": "warm"}',
      })

      // The stream said so, and run.completed carries the object.
      const events = String(
        (
          await server.request('GET', `/api/runs/${run.id}/events`, {
            token: alice.token,
            headers: { accept: 'text/event-stream' },
          })
        ).body,
      )
      expect(events).toMatch(/event: output\.invalid\ndata: (?=.*"attempt":1)(?=.*\/celsius must be number)/)
      expect(events).toMatch(/event: run\.completed\ndata: .*"output":\{"city":"Paris","celsius":21\}/)
    })

    it('an answer that never validates ends the run failed output_invalid with the errors', async () => {
      const created = await startRun({ model: 'stubborn', output: { schema: weather, maxRepairs: 1 } })
      expect(created.status).toBe(201)
      const run = await waitForRun(server, alice.token, created.body.id as string, ['completed', 'failed'])
      expect(run.status).toBe('failed')
      expect(run.error).toMatchObject({
        code: 'output_invalid',
        message: expect.stringMatching(/2 attempts/),
        errors: [expect.stringMatching(/not JSON/)],
      })
      expect(run.usage).toMatchObject({ modelCalls: 2 })
      expect(run.output).toBe(null)
    })

    it('a run without output is untouched: its text answer completes it', async () => {
      const created = await startRun({ model: 'stubborn' })
      const run = await waitForRun(server, alice.token, created.body.id as string, ['completed', 'failed'])
      expect(run).toMatchObject({ status: 'completed', output: null })
    })

    it('refuses a schema that is not a JSON Schema, and a bad name, with stable codes', async () => {
      const bad = await startRun({ model: 'stubborn', output: { schema: { type: 'no-such-type' } } })
      expect(bad.status).toBe(400)
      expect(bad.headers.get('content-type')).toMatch(/^application\/problem\+json/)
      expect(bad.body.code).toBe('output_schema_invalid')
      // Compiles, then recurses for ever on any value: refused before the run, not ended as a bug.
      for (const schema of [
        { $ref: '#' },
        { anyOf: [{ $ref: '#' }] },
        { allOf: [{ $ref: '#/$defs/a' }], $defs: { a: { $ref: '#' } } },
      ]) {
        const endless = await startRun({ model: 'stubborn', output: { schema } })
        expect([endless.status, endless.body.code]).toEqual([400, 'output_schema_invalid'])
        expect(endless.body.detail).toMatch(/refers to itself/)
      }
      const badName = await startRun({ model: 'stubborn', output: { schema: weather, name: 'has spaces' } })
      expect(badName.status).toBe(400)
      expect(badName.body.code).toBe('validation_failed')
    })
  })
}
