import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { OpenAIChatModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import {
  openaiTextChunks,
  openaiToolCallChunks,
  startFakeUpstream,
  type FakeUpstream,
} from './helpers/fake-upstream.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// Images in tool results (docs/guides/agent-runs.md#images-in-tool-results): an execution that writes a
// plot names it in its result; the tool message keeps it; a vision model is sent it after the results,
// a model without vision reads only the result's text.
const png = 'iVBORw0KGgoAAAANSUhEUgAAAAIAAAADCAIAAAA2iEnWAAAAEklEQVR4nGP4z8DAwMDAwMAAAAQAAf/pMS8AAAAASUVORK5CYII='

describe('images in tool results', () => {
  let store: Store
  let server: TestServer
  let upstream: FakeUpstream
  let alice: TestUser
  let projectId: string

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    store = await openTestStore('pglite')
    const common = {
      baseUrl: '',
      apiKey: 'sk-test-0123456789',
      contextWindow: 100_000,
      supportsTools: true,
      idleTimeoutMs: 2_000,
    }
    server = await startTestServer(store, {
      models: [
        new OpenAIChatModel({
          ...common,
          id: 'gpt-vision',
          model: 'gpt-v',
          baseUrl: `${upstream.url}/v1`,
          capabilities: ['vision'],
        }),
        new OpenAIChatModel({ ...common, id: 'gpt-text', model: 'gpt-t', baseUrl: `${upstream.url}/v1` }),
      ],
      exec: { backend: 'direct', timeoutMs: 10_000 },
    })
    alice = await server.createUser()
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'plots' } })).body.id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
    await upstream?.close()
  })

  /** A run whose model writes a plot with run_code (approved: under direct every execution asks), then answers. */
  const plotRun = async (model: string) => {
    const conversationId = (
      await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id as string
    const before = upstream.requests.length
    upstream.enqueue({
      kind: 'openai-stream',
      chunks: openaiToolCallChunks([
        {
          id: 'c1',
          name: 'run_code',
          arguments: JSON.stringify({ language: 'bash', code: `echo ${png} | base64 -d > plot.png` }),
        },
      ]),
    })
    upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('A tall red plot.', 2) })
    const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: { model, input: 'Plot it and look at it.' },
    })
    expect(created.status).toBe(201)
    const waiting = await waitForRun(server, alice.token, created.body.id as string, ['requires_action'])
    const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!.decisionId
    await server.request('POST', `/api/decisions/${decisionId}`, { token: alice.token, body: { decision: 'approve' } })
    const done = await waitForRun(server, alice.token, created.body.id as string, ['completed', 'failed'])
    expect(done.status).toBe('completed')
    return { conversationId, calls: upstream.requests.slice(before).map((request) => request.body) }
  }

  it('sends the plot an execution wrote to a vision model after the tool results', async () => {
    const { conversationId, calls } = await plotRun('gpt-vision')
    expect(calls).toHaveLength(2)
    const messages = calls[1].messages
    const tool = messages.findIndex((message: { role: string }) => message.role === 'tool')
    expect(messages[tool].content).toMatch(/images written: plot\.png \(image\/png, 2×3\)/)
    expect(messages[tool + 1]).toEqual({
      role: 'user',
      content: [
        { type: 'text', text: 'The images the tool results above refer to:' },
        { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } },
      ],
    })
    // The tool message keeps the image; the call's output names it (the console shows it from there).
    const stored = await server.request('GET', `/api/conversations/${conversationId}/messages`, { token: alice.token })
    const toolMessage = stored.body.items.find((message: { role: string }) => message.role === 'tool')
    expect(toolMessage.parts).toEqual([
      { type: 'image', path: 'plot.png', mediaType: 'image/png', width: 2, height: 3, bytes: expect.any(Number) },
    ])
  })

  it('a model without vision reads only the text, which names the image', async () => {
    const { calls } = await plotRun('gpt-text')
    const messages = calls[1].messages
    expect(messages.at(-1).role).toBe('tool')
    expect(messages.at(-1).content).toMatch(/images written: plot\.png/)
    expect(JSON.stringify(messages)).not.toMatch(/image_url/)
  })
})
