import { createServer, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AnthropicMessagesModel, ModelError, OpenAIChatModel, type StreamPart } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { testDb } from '../src/store/test-access.js'
import { openTestStore } from './helpers/engines.js'
import {
  anthropicMessageEnd,
  anthropicMessageStart,
  anthropicToolUseEvents,
  openaiTextChunks,
  openaiToolCallChunks,
  startFakeUpstream,
  type FakeUpstream,
} from './helpers/fake-upstream.js'
import { ledgerViolations } from './helpers/ledger.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// What one model answer may bring (docs/guides/agent-runs.md#limits-on-an-answer): a broken or hostile
// upstream fails its run, and the server — the embedded database above all — stays whole.
describe('limits on a model answer (runs, embedded database)', () => {
  let store: Store
  let server: TestServer
  let upstream: FakeUpstream
  let alice: TestUser
  let projectId: string

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    store = await openTestStore('pglite')
    const model = { baseUrl: `${upstream.url}/v1`, contextWindow: 100_000, supportsTools: true, idleTimeoutMs: 5_000 }
    server = await startTestServer(store, {
      plugins: ['rdm'],
      llmMaxOutputChars: 50_000,
      models: [
        new OpenAIChatModel({ id: 'gpt', model: 'gpt-test', ...model }),
        new AnthropicMessagesModel({ id: 'claude', model: 'claude-test', ...model, baseUrl: upstream.url }),
      ],
    })
    alice = await server.createUser()
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'limits' } })).body
      .id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
    await upstream?.close()
  })

  async function runToEnd(
    model: string,
  ): Promise<{ id: string; status: string; error?: { code: string; message: string } }> {
    const conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: { input: 'go', model },
    })
    expect(created.status).toBe(201)
    let run = created.body
    const deadline = Date.now() + 60_000
    while ((run.status === 'running' || run.status === 'queued') && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50))
      run = (await server.request('GET', `/api/runs/${created.body.id}`, { token: alice.token })).body
    }
    return run
  }

  const manyCalls = (count: number) =>
    Array.from({ length: count }, (_, index) => ({ id: `call_${index}`, name: 'rdm__ping', arguments: '{}' }))

  it('an answer with more tool calls than llmMaxToolCalls (128) fails its run; none is stored or run', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiToolCallChunks(manyCalls(200)), whole: true })
    const run = await runToEnd('gpt')
    expect(run.status).toBe('failed')
    expect(run.error?.code).toBe('output_too_large')
    expect(run.error?.message).toMatch(/128 tool calls \(llmMaxToolCalls\)/)
    const db = testDb(store)
    expect(await db.selectFrom('run_tool_calls').where('run_id', '=', run.id).select('id').execute()).toEqual([])
    const created = await db
      .selectFrom('events')
      .where('run_id', '=', run.id)
      .where('type', '=', 'tool_call.created')
      .select('id')
      .execute()
    expect(created).toEqual([])
    expect(await ledgerViolations(store)).toEqual([])
  })

  it('the same on the Anthropic wire format', async () => {
    upstream.enqueue({
      kind: 'anthropic-stream',
      events: [
        anthropicMessageStart(),
        ...manyCalls(150).flatMap((call, index) => anthropicToolUseEvents(index, call)),
        ...anthropicMessageEnd('tool_use'),
      ],
      whole: true,
    })
    const run = await runToEnd('claude')
    expect(run.status).toBe('failed')
    expect(run.error?.code).toBe('output_too_large')
  })

  it('thousands of calls (past what one statement can bind) leave the embedded database working', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiToolCallChunks(manyCalls(5_500)), whole: true })
    expect((await runToEnd('gpt')).error?.code).toBe('output_too_large')
    // The next run writes and reads as before.
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Still here.', 2) })
    const next = await runToEnd('gpt')
    expect(next.status).toBe('completed')
    const projects = await server.request('GET', '/api/projects', { token: alice.token })
    expect(projects.body.items.map((project: { id: string }) => project.id)).toContain(projectId)
  })

  it('text past llmMaxOutputChars stops the call; the run fails and keeps the text so far on the message', async () => {
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('x'.repeat(80_000), 80) })
    const run = await runToEnd('gpt')
    expect(run.status).toBe('failed')
    expect(run.error?.code).toBe('output_too_large')
    expect(run.error?.message).toMatch(/50000 characters \(llmMaxOutputChars\)/)
    const message = await testDb(store)
      .selectFrom('messages')
      .where('run_id', '=', run.id)
      .where('role', '=', 'assistant')
      .select(['status', 'content'])
      .executeTakeFirstOrThrow()
    expect(message.status).toBe('failed')
    expect(message.content!.length).toBeLessThanOrEqual(50_000)
  })

  it('tool-call arguments past llmMaxOutputChars fail the run before anything is stored', async () => {
    const big = JSON.stringify({ target: 'y'.repeat(60_000) })
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: openaiToolCallChunks([{ id: 'call_big', name: 'rdm__ping', arguments: big }], {
        argumentPieceSize: 8_192,
      }),
    })
    const run = await runToEnd('gpt')
    expect(run.error?.code).toBe('output_too_large')
    expect(
      await testDb(store).selectFrom('run_tool_calls').where('run_id', '=', run.id).select('id').execute(),
    ).toEqual([])
  })

  it('arguments nested deeper than 64 levels are answered to the model as invalid_arguments', async () => {
    const deep = `{"a":${'['.repeat(10_000)}${']'.repeat(10_000)}}`
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: openaiToolCallChunks([{ id: 'call_deep', name: 'rdm__ping', arguments: deep }], {
        argumentPieceSize: 4_096,
      }),
    })
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Understood.', 2) })
    const run = await runToEnd('gpt')
    expect(run.status, JSON.stringify(run.error)).toBe('completed')
    const toolMessage = upstream.requests
      .at(-1)!
      .body.messages.find((message: { role: string }) => message.role === 'tool')
    expect(JSON.parse(toolMessage.content)).toMatchObject({ error: { code: 'invalid_arguments' } })
    expect(toolMessage.content).toMatch(/nested deeper than 64 levels/)
  })
})

/** A local upstream whose answer is written by `answer`, for what the scripted fake cannot send. */
async function startRawUpstream(answer: (response: ServerResponse) => void): Promise<{ url: string; server: Server }> {
  const server = createServer((request, response) => {
    request.resume()
    request.on('end', () => answer(response))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server }
}

async function firstFailure(model: OpenAIChatModel): Promise<{ error: ModelError; ms: number }> {
  const started = performance.now()
  try {
    const parts: StreamPart[] = []
    for await (const part of model.stream({ messages: [{ role: 'user', content: 'hi' }], tools: [] })) parts.push(part)
  } catch (error) {
    expect(error).toBeInstanceOf(ModelError)
    return { error: error as ModelError, ms: performance.now() - started }
  }
  throw new Error('the call did not fail')
}

describe('limits on an upstream call (the wire)', () => {
  const servers: Server[] = []
  afterAll(async () => {
    for (const server of servers) {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  })
  const model = (
    url: string,
    options: ConstructorParameters<typeof OpenAIChatModel>[0] extends infer O ? Partial<O> : never,
  ) => new OpenAIChatModel({ id: 'm', model: 'm', baseUrl: url, contextWindow: 8_000, supportsTools: true, ...options })

  it('a line that never ends stops at llmMaxAnswerBytes (output_too_large), not at the memory limit', async () => {
    const { url, server } = await startRawUpstream((response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' })
      response.write('data: {"choices":[{"delta":{"content":"')
      const chunk = 'z'.repeat(64 * 1024)
      const pump = () => {
        while (!response.destroyed && response.write(chunk));
        if (!response.destroyed) response.once('drain', pump)
      }
      pump()
    })
    servers.push(server)
    const { error } = await firstFailure(model(url, { maxAnswerBytes: 1024 * 1024 }))
    expect(error.code).toBe('output_too_large')
    expect(error.message).toMatch(/1048576 bytes \(llmMaxAnswerBytes\)/)
    expect(error.isRetryable).toBe(false)
  })

  it('a stream that trickles for ever stops at llmCallTimeoutMs (timeout), though it is never idle', async () => {
    const { url, server } = await startRawUpstream((response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' })
      const timer = setInterval(() => {
        if (response.destroyed) clearInterval(timer)
        else response.write(`data: ${JSON.stringify({ choices: [{ delta: { content: '.' } }] })}\n\n`)
      }, 100)
      response.on('close', () => clearInterval(timer))
    })
    servers.push(server)
    const { error, ms } = await firstFailure(model(url, { idleTimeoutMs: 1_000, callTimeoutMs: 1_500 }))
    expect(error.code).toBe('timeout')
    expect(error.message).toMatch(/took longer than 1500 ms \(llmCallTimeoutMs\)/)
    expect(ms).toBeGreaterThanOrEqual(1_400)
  })

  it('an error body is read up to 64 KiB: a flood that never ends does not hold the call', async () => {
    const { url, server } = await startRawUpstream((response) => {
      response.writeHead(400, { 'content-type': 'text/plain' })
      response.write(`model overloaded by a flood ${'e'.repeat(128 * 1024)}`)
      // …and never ends: before, the whole body was awaited until the idle timeout.
    })
    servers.push(server)
    const { error } = await firstFailure(model(url, { idleTimeoutMs: 3_000 }))
    expect(error.code).not.toBe('timeout')
    expect(error.upstreamStatus).toBe(400)
    expect(error.message).toMatch(/model overloaded by a flood/)
  })
})
