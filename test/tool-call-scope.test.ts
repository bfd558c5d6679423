import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel, type LanguageModel, type ModelRequest, type StreamPart } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { openSse } from './helpers/sse-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitFor, waitForRun } from './helpers/waits.js'

const classified = new URL('./__fixtures__/plugins/classified.ts', import.meta.url).pathname
const held = new URL('./__fixtures__/plugins/held-tool.ts', import.meta.url).pathname

/** A scripted model that can be held just before it emits its tool calls (the turn is still streaming). */
class HoldableModel implements LanguageModel {
  readonly id = 'holdable'
  readonly provider = 'scripted' as const
  readonly supportsTools = true
  readonly contextWindow = 128_000
  readonly script = new ScriptedModel({ id: 'holdable', turns: [] })
  /** While set, a turn waits here before its first tool call. */
  gate: Promise<void> | undefined
  holding = false

  async *stream(request: ModelRequest): AsyncGenerator<StreamPart> {
    for await (const part of this.script.stream(request)) {
      if (part.type === 'tool-call' && this.gate) {
        this.holding = true
        await this.gate
        this.gate = undefined
        this.holding = false
      }
      yield part
    }
  }
}

// A tool call is authorized against the conversation and project as they are when the model's turn
// ends (read in the statement that ends it), and every later call of the round reads them again
// (docs/guides/commands-and-decisions.md, the gate).
for (const engine of testEngines()) {
  describe(`the permission mode a tool call is gated by, on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let projectId: string
    let dir: string
    const model = new HoldableModel()

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'plinth-scope-'))
      store = await openTestStore(engine)
      server = await startTestServer(store, { models: [model], plugins: [classified, held] })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'modes' } })).body
        .id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
      if (dir) await rm(dir, { recursive: true, force: true })
    })

    const conversationIn = async (permissionMode: string): Promise<string> => {
      const id = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      const set = await server.request('PATCH', `/api/conversations/${id}`, {
        token: alice.token,
        body: { permissionMode },
      })
      expect(set.status).toBe(200)
      return id
    }
    const setMode = async (conversationId: string, permissionMode: string): Promise<void> => {
      const set = await server.request('PATCH', `/api/conversations/${conversationId}`, {
        token: alice.token,
        body: { permissionMode },
      })
      expect(set.status).toBe(200)
    }
    const start = async (conversationId: string): Promise<string> => {
      const run = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: { input: 'go', knowledge: { autoInject: false } },
      })
      expect(run.status).toBe(201)
      return run.body.id as string
    }
    const decisionsOf = (run: Record<string, unknown>) =>
      ((run.requiredAction as { decisions?: Array<{ commandId: string }> } | null)?.decisions ?? []).map(
        (decision) => decision.commandId,
      )

    /** A run whose model, holding before its high-risk call, sees the mode changed from `from` to `to`. */
    const modeChangedWhileAnswering = async (from: string, to: string) => {
      const conversationId = await conversationIn(from)
      model.script.setTurns([
        { text: 'let me see', toolCalls: [{ name: 'classified__touch', arguments: { path: '/etc/hosts' } }] },
        { text: 'done' },
      ])
      let release!: () => void
      model.gate = new Promise((resolve) => (release = resolve))
      const runId = await start(conversationId)
      await waitFor(() => model.holding, { what: 'the model turn held before its tool call' })
      await setMode(conversationId, to)
      release()
      return waitForRun(server, alice.token, runId, ['requires_action', 'completed', 'failed'], 30_000)
    }

    it('a mode turned back to manual while the model is answering makes its call ask', async () => {
      const run = await modeChangedWhileAnswering('full', 'manual')
      expect(run.status).toBe('requires_action')
      expect(decisionsOf(run)).toEqual(['classified.touch'])
    })

    it('a mode set to full while the model is answering lets its call run without asking', async () => {
      const run = await modeChangedWhileAnswering('manual', 'full')
      expect(run.status).toBe('completed')
    })

    it("a round's later call is gated by the mode as it is when that call starts, not when the turn ended", async () => {
      const conversationId = await conversationIn('full')
      const file = join(dir, `release-${engine}`)
      model.script.setTurns([
        {
          toolCalls: [
            { name: 'held__until', arguments: { file } },
            { name: 'classified__touch', arguments: { path: '/etc/hosts' } },
          ],
        },
        { text: 'done' },
      ])
      const stream = await openSse(`${server.url}/api/conversations/${conversationId}/events`, { token: alice.token })
      const runId = await start(conversationId)
      // The first call is running (it ran without asking, in full mode); the mode changes under it.
      const created = await stream.waitForEvent(
        (event) => event.event === 'tool_call.created' && event.data.name === 'held__until',
        { what: 'the first call created', timeoutMs: 30_000 },
      )
      await stream.waitForEvent(
        (event) => event.event === 'tool_call.started' && event.data.callId === created.data.callId,
        { what: 'the first call started', timeoutMs: 30_000 },
      )
      stream.close()
      await setMode(conversationId, 'manual')
      await writeFile(file, 'go')
      const run = await waitForRun(server, alice.token, runId, ['requires_action', 'completed', 'failed'], 30_000)
      expect(run.status).toBe('requires_action')
      expect(decisionsOf(run)).toEqual(['classified.touch'])
    })
  })
}
