import { Writable } from 'node:stream'
import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AnthropicMessagesModel, OpenAIChatModel } from '../../src/llm/index.js'
import type { Store } from '../../src/store/index.js'
import { openTestStore } from '../helpers/engines.js'
import {
  anthropicMessageEnd,
  anthropicMessageStart,
  anthropicTextEvents,
  anthropicToolUseEvents,
  openaiChunk,
  openaiTextChunks,
  openaiToolCallChunks,
  startFakeUpstream,
  type FakeReply,
  type FakeUpstream,
} from '../helpers/fake-upstream.js'
import { ledgerViolations } from '../helpers/ledger.js'
import { recordFigures } from './figures.js'
import { startTestServer, type TestServer, type TestUser } from '../helpers/test-server.js'
import { testDb } from '../../src/store/test-access.js'

const openaiKey = 'sk-malformed-openai-key-0123456789'
const anthropicKey = 'sk-ant-malformed-key-0123456789'
const hugeArguments = JSON.stringify({ target: 'x'.repeat(2 * 1024 * 1024) })

/** A case: what the upstream sends, and how the run may end (a failure must carry one of the codes). */
interface Case {
  name: string
  model: 'gpt' | 'claude'
  replies: FakeReply[]
  ends: Array<'completed' | 'failed'>
  codes?: string[]
}

const cases: Case[] = [
  {
    name: 'OpenAI: a frame cut in the middle of its JSON',
    model: 'gpt',
    replies: [{ kind: 'openai-stream', chunks: ['{"choices":[{"delta":{"content":"hel'] }],
    ends: ['failed'],
    codes: ['upstream_error'],
  },
  {
    name: 'OpenAI: invalid JSON after some text',
    model: 'gpt',
    replies: [
      {
        kind: 'openai-stream',
        chunks: [
          ...openaiTextChunks('Hello there', 2).slice(0, 2),
          'not json at all',
          ...openaiTextChunks('', 1).slice(-2),
        ],
      },
    ],
    ends: ['failed', 'completed'],
    codes: ['upstream_error'],
  },
  {
    name: 'OpenAI: unknown fields and delta types',
    model: 'gpt',
    replies: [
      {
        kind: 'openai-stream',
        chunks: [openaiChunk({ weird: { nested: true } }), { object: 'mystery' }, ...openaiTextChunks('Fine.', 2)],
      },
    ],
    ends: ['completed'],
  },
  {
    name: 'OpenAI: a stream that never ends',
    model: 'gpt',
    replies: [{ kind: 'openai-stream', chunks: openaiTextChunks('never finishes', 5), stallAfter: 2 }],
    ends: ['failed'],
    codes: ['timeout'],
  },
  {
    name: 'OpenAI: 200 with an HTML body',
    model: 'gpt',
    replies: [{ kind: 'error', status: 200, body: '<html><body>Welcome to the proxy</body></html>' }],
    ends: ['failed'],
    codes: ['upstream_error'],
  },
  {
    name: 'OpenAI: 502 with an HTML body, three times',
    model: 'gpt',
    replies: [1, 2, 3, 4].map(() => ({ kind: 'error' as const, status: 502, body: '<html>Bad gateway</html>' })),
    ends: ['failed'],
    codes: ['upstream_error'],
  },
  {
    name: 'OpenAI: gigantic tool arguments (2 MiB, past llmMaxOutputChars)',
    model: 'gpt',
    replies: [
      {
        kind: 'openai-stream',
        chunks: openaiToolCallChunks([{ id: 'call_big', name: 'rdm__ping', arguments: hugeArguments }], {
          argumentPieceSize: 256 * 1024,
        }),
      },
      { kind: 'openai-stream', chunks: openaiTextChunks('Too big, sorry.', 2) },
    ],
    ends: ['failed'],
    codes: ['output_too_large'],
  },
  {
    name: 'OpenAI: connection reset in the middle of a tool call',
    model: 'gpt',
    replies: [
      {
        kind: 'openai-stream',
        chunks: openaiToolCallChunks([{ id: 'call_1', name: 'rdm__ping', arguments: '{"target":"somewhere far"}' }], {
          argumentPieceSize: 3,
        }),
        cutAfter: 4,
      },
    ],
    ends: ['failed'],
    codes: ['upstream_error'],
  },
  {
    name: 'Anthropic: unknown event types among the real ones',
    model: 'claude',
    replies: [
      {
        kind: 'anthropic-stream',
        events: [
          anthropicMessageStart(),
          { event: 'ping', data: { type: 'ping' } },
          { event: 'mystery', data: { type: 'mystery', x: 1 } },
          ...anthropicTextEvents('All good.', 2),
          ...anthropicMessageEnd('end_turn'),
        ],
      },
    ],
    ends: ['completed'],
  },
  {
    name: 'Anthropic: a frame cut in the middle of its JSON',
    model: 'claude',
    replies: [
      {
        kind: 'anthropic-stream',
        events: [
          anthropicMessageStart(),
          {
            event: 'content_block_delta',
            data: '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x',
          },
        ],
      },
    ],
    ends: ['failed'],
    codes: ['upstream_error'],
  },
  {
    name: 'Anthropic: 200 with an HTML body',
    model: 'claude',
    replies: [{ kind: 'error', status: 200, body: '<html>hello</html>' }],
    ends: ['failed'],
    codes: ['upstream_error'],
  },
  {
    name: 'Anthropic: connection reset in the middle of tool_use',
    model: 'claude',
    replies: [
      {
        kind: 'anthropic-stream',
        events: [
          anthropicMessageStart(),
          ...anthropicToolUseEvents(0, { id: 'toolu_1', name: 'rdm__ping', arguments: '{"target":"far away"}' }, 3),
        ],
        cutAfter: 4,
      },
    ],
    ends: ['failed'],
    codes: ['upstream_error'],
  },
  {
    name: 'Anthropic: an error event mid-stream',
    model: 'claude',
    replies: [
      {
        kind: 'anthropic-stream',
        events: [
          anthropicMessageStart(),
          ...anthropicTextEvents('Half', 1).slice(0, 2),
          { event: 'error', data: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } } },
        ],
      },
    ],
    ends: ['failed'],
    codes: ['upstream_error'],
  },
]

// Malformed upstreams (docs/guides/reliability.md): whatever the provider sends, a run ends cleanly (failed
// with the right code, or completed), the ledger holds, nothing is left running, and no key reaches
// events or logs.
describe('runs against malformed upstreams', () => {
  let store: Store
  let server: TestServer
  let upstream: FakeUpstream
  let alice: TestUser
  let projectId: string
  let logs = ''

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    store = await openTestStore('pglite')
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        logs += chunk.toString()
        done()
      },
    })
    server = await startTestServer(store, {
      plugins: ['rdm'],
      logger: pino({ level: 'trace' }, sink),
      models: [
        new OpenAIChatModel({
          id: 'gpt',
          model: 'gpt-test',
          baseUrl: `${upstream.url}/v1`,
          apiKey: openaiKey,
          contextWindow: 100_000,
          supportsTools: true,
          idleTimeoutMs: 500,
        }),
        new AnthropicMessagesModel({
          id: 'claude',
          model: 'claude-test',
          baseUrl: upstream.url,
          apiKey: anthropicKey,
          contextWindow: 100_000,
          supportsTools: true,
          idleTimeoutMs: 500,
        }),
      ],
    })
    alice = await server.createUser()
    projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'malformed' } }))
      .body.id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
    await upstream?.close()
  })

  for (const testCase of cases) {
    it(testCase.name, { timeout: 60_000 }, async () => {
      for (const reply of testCase.replies) upstream.enqueue(reply)
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'go', model: testCase.model },
      })
      expect(created.status).toBe(201)
      let run = created.body
      for (let attempt = 0; attempt < 400 && (run.status === 'running' || run.status === 'queued'); attempt++) {
        await new Promise((resolve) => setTimeout(resolve, 50))
        run = (await server.request('GET', `/api/runs/${created.body.id}`, { token: alice.token })).body
      }
      expect(testCase.ends, JSON.stringify(run.error)).toContain(run.status)
      if (run.status === 'failed') expect(testCase.codes).toContain(run.error.code)
      // Scripted replies not used up (a failure before the second turn) must not reach the next case.
      upstream.clear()
      expect(await ledgerViolations(store)).toEqual([])
    })
  }

  it('no key reached the events or any log line (trace level)', async () => {
    const events = JSON.stringify(await testDb(store).selectFrom('events').select('data').execute())
    for (const key of [openaiKey, anthropicKey]) {
      expect(events).not.toContain(key)
      expect(logs).not.toContain(key)
    }
    expect(logs.length).toBeGreaterThan(1000)
    recordFigures('malformed-upstreams', [
      {
        check: 'Malformed upstreams (OpenAI and Anthropic wire formats)',
        figure: `${cases.length} cases, each ended cleanly with the ledger intact; no key in events or trace logs`,
        goal: 'clean run.failed or completed, 0 leaks',
        ok: true,
      },
    ])
  })
})
