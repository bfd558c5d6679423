import { afterAll, beforeAll, describe, expect, it } from 'vitest'
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

// Long-term memory (docs/guides/memory.md): facts a user (or a project) keeps across conversations,
// written and read through the memory.* commands (the model's tools) and /api/memories, recalled into
// a run's prompt at its start unless the run or the project is isolated.

interface WireMessage {
  role: string
  content: unknown
}

for (const engine of apiEngines()) {
  describe(`long-term memory (${engine})`, () => {
    let store: Store
    let server: TestServer
    let upstream: FakeUpstream
    let alice: TestUser
    let bob: TestUser
    let aliceProject: string
    let bobProject: string

    beforeAll(async () => {
      upstream = await startFakeUpstream()
      store = await openTestStore(engine)
      server = await startTestServer(store, { plugins: ['rdm'], models: [fakeOpenAIModel(upstream, 'wire')] })
      alice = await server.createUser()
      bob = await server.createUser()
      const project = async (user: TestUser, name: string) =>
        (await server.request('POST', '/api/projects', { token: user.token, body: { name } })).body.id as string
      aliceProject = await project(alice, 'alice memory')
      bobProject = await project(bob, 'bob memory')
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
      await upstream?.close()
    })

    /** Runs `input` in a new conversation of the project; the upstream answers `replies` in turn. */
    const run = async (
      user: TestUser,
      projectId: string,
      input: string,
      replies: Array<{ tool: string; args: Record<string, unknown> } | string>,
      extra: Record<string, unknown> = {},
    ) => {
      const before = upstream.requests.length
      for (const reply of replies)
        upstream.enqueue({
          kind: 'openai-stream',
          chunks:
            typeof reply === 'string'
              ? openaiTextChunks(reply, 2)
              : openaiToolCallChunks([{ id: `c${before}`, name: reply.tool, arguments: JSON.stringify(reply.args) }]),
        })
      const conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: user.token, body: {} })
      ).body.id
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: user.token,
        body: { input, model: 'wire', approvalPolicy: 'dontAsk', ...extra },
      })
      expect(created.status).toBe(201)
      const done = await waitForRun(server, user.token, created.body.id as string, ['completed', 'failed'])
      expect(done.status).toBe('completed')
      const calls = upstream.requests.slice(before).map((request) => request.body as { messages: WireMessage[] })
      const events = String(
        (
          await server.request('GET', `/api/runs/${done.id}/events`, {
            token: user.token,
            headers: { accept: 'text/event-stream' },
          })
        ).body,
      )
      return { run: done, calls, events }
    }
    const recalledBlock = (messages: WireMessage[]) =>
      messages.find((message) => typeof message.content === 'string' && message.content.startsWith('<recalled-memory>'))
        ?.content as string | undefined
    const toolResult = (messages: WireMessage[]) =>
      JSON.parse(String(messages.findLast((message) => message.role === 'tool')?.content)) as Record<string, unknown>

    it('a fact remembered in one conversation is recalled in another of the same user, never in another user’s', async () => {
      const remembered = await run(alice, aliceProject, 'Remember that my favourite colour is teal.', [
        {
          tool: 'memory_remember',
          args: { text: 'The user’s favourite colour is teal.', key: 'favourite-colour', value: { colour: 'teal' } },
        },
        'Noted.',
      ])
      const stored = toolResult(remembered.calls[1]!.messages)
      expect(stored).toMatchObject({ created: true, memory: { scope: 'user', key: 'favourite-colour' } })

      // Another conversation (another project, even): recalled into the prompt, and the tool finds it.
      const other = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'x' } })).body
        .id as string
      const later = await run(alice, other, 'What is my favourite colour?', [
        { tool: 'memory_recall', args: { query: 'favourite colour' } },
        'Teal.',
      ])
      expect(recalledBlock(later.calls[0]!.messages)).toMatch(/favourite colour is teal/)
      // Framed as data, just before the user's message.
      const first = later.calls[0]!.messages
      expect(first.at(-2)?.content).toMatch(/^<recalled-memory>/)
      expect(first.at(-1)).toMatchObject({ role: 'user', content: 'What is my favourite colour?' })
      expect(later.events).toMatch(/event: memory\.recalled\ndata: .*"key":"favourite-colour"/)
      const found = toolResult(later.calls[1]!.messages) as { memories: Array<{ text: string; value: unknown }> }
      expect(found.memories[0]).toMatchObject({
        text: 'The user’s favourite colour is teal.',
        value: { colour: 'teal' },
      })

      // Bob asks the same: nothing of Alice's, in the prompt or from the tool.
      const bobs = await run(bob, bobProject, 'What is my favourite colour?', [
        { tool: 'memory_recall', args: { query: 'favourite colour teal' } },
        'I do not know.',
      ])
      expect(JSON.stringify(bobs.calls)).not.toMatch(/colour is teal/)
      expect(toolResult(bobs.calls[1]!.messages)).toEqual({ memories: [] })
      expect(bobs.events).not.toMatch(/memory\.recalled/)
      const id = (stored.memory as { id: string }).id
      expect((await server.request('GET', `/api/memories/${id}`, { token: bob.token })).status).toBe(404)
      expect((await server.request('GET', '/api/memories', { token: bob.token })).body.items).toEqual([])
      expect(
        (await server.request('DELETE', `/api/memories/${id}`, { token: bob.token })).status,
        'Bob cannot forget it',
      ).toBe(404)
    })

    it('forgetting removes it from the next search and the next run', async () => {
      const found = await server.request('GET', '/api/memories?q=favourite%20colour', { token: alice.token })
      expect(found.status).toBe(200)
      const memory = found.body.items[0]
      expect(memory).toMatchObject({ key: 'favourite-colour', scope: 'user', score: expect.any(Number) })
      const forget = () =>
        server.request('DELETE', `/api/memories/${memory.id}`, {
          token: alice.token,
          headers: { 'idempotency-key': `forget-${memory.id}` },
        })
      const forgotten = await forget()
      expect(forgotten.status).toBe(204)
      // A retry with the same key answers what the first got, though the memory is gone.
      const retried = await forget()
      expect([retried.status, retried.headers.get('idempotent-replayed')]).toEqual([204, 'true'])
      // Without the key, it is gone.
      expect((await server.request('DELETE', `/api/memories/${memory.id}`, { token: alice.token })).status).toBe(404)
      expect(
        (await server.request('GET', '/api/memories?q=favourite%20colour', { token: alice.token })).body.items,
      ).toEqual([])
      expect((await server.request('GET', `/api/memories/${memory.id}`, { token: alice.token })).status).toBe(404)
      const after = await run(alice, aliceProject, 'What is my favourite colour?', ['I do not know.'])
      expect(recalledBlock(after.calls[0]!.messages)).toBeUndefined()
      // The forgetting is audited like any effect.
      const audit = await server.request('GET', '/api/audit?commandId=memory.forget', { token: alice.token })
      expect(audit.body.items.length).toBeGreaterThan(0)
    })

    it('keeps facts over HTTP: create, replace by key, change, list in pages, with CJK search', async () => {
      const create = (body: Record<string, unknown>) =>
        server.request('POST', '/api/memories', { token: alice.token, body })
      const tea = await create({ text: '用户喜欢喝乌龙茶', namespace: 'prefs', key: 'tea' })
      expect(tea.status).toBe(201)
      expect(tea.body).toMatchObject({ scope: 'user', projectId: null, namespace: 'prefs', key: 'tea', value: null })
      const replaced = await create({ text: '用户喜欢喝乌龙茶，不加糖', namespace: 'prefs', key: 'tea' })
      expect([replaced.status, replaced.body.id]).toEqual([200, tea.body.id])
      const patched = await server.request('PATCH', `/api/memories/${tea.body.id}`, {
        token: alice.token,
        body: { value: { sugar: false } },
      })
      expect(patched.status).toBe(200)
      expect(patched.body).toMatchObject({ text: '用户喜欢喝乌龙茶，不加糖', value: { sugar: false } })
      const search = await server.request('GET', `/api/memories?q=${encodeURIComponent('乌龙茶')}`, {
        token: alice.token,
      })
      expect(search.body.items.map((item: { id: string }) => item.id)).toEqual([tea.body.id])

      for (let index = 0; index < 3; index++) expect((await create({ text: `fact number ${index}` })).status).toBe(201)
      const first = await server.request('GET', '/api/memories?limit=2', { token: alice.token })
      expect(first.body.items).toHaveLength(2)
      expect(first.body.nextCursor).toEqual(expect.any(String))
      const second = await server.request('GET', `/api/memories?limit=10&cursor=${first.body.nextCursor}`, {
        token: alice.token,
      })
      const ids = [...first.body.items, ...second.body.items].map((item: { id: string }) => item.id)
      expect(new Set(ids).size).toBe(ids.length)
      expect(ids).toContain(tea.body.id)
      const prefs = await server.request('GET', '/api/memories?namespace=prefs', { token: alice.token })
      expect(prefs.body.items.map((item: { key: string }) => item.key)).toEqual(['tea'])
    })

    it('refuses bad memories with stable codes', async () => {
      const create = (body: Record<string, unknown>) =>
        server.request('POST', '/api/memories', { token: alice.token, body })
      const long = await create({ text: 'x'.repeat(4001) })
      expect([long.status, long.body.code]).toEqual([413, 'memory_too_large'])
      // Characters, not UTF-16 units: 4,000 emoji fit, one more does not.
      expect((await create({ text: '🦘'.repeat(4000), key: 'emoji' })).status).toBe(201)
      expect((await create({ text: '🦘'.repeat(4001), key: 'emoji' })).status).toBe(413)
      const big = await create({ text: 'big value', value: { blob: 'y'.repeat(17_000) } })
      expect([big.status, big.body.code]).toEqual([413, 'memory_too_large'])
      for (const field of ['key', 'namespace']) {
        const tooLong = await create({ text: 'fact', [field]: 'k'.repeat(201) })
        expect([tooLong.status, tooLong.body.code], field).toEqual([413, 'memory_too_large'])
      }
      const scope = await create({ text: 'fact', scope: 'team' })
      expect([scope.status, scope.body.code]).toEqual([400, 'validation_failed'])
      const noProject = await create({ text: 'fact', scope: 'project' })
      expect([noProject.status, noProject.body.code]).toEqual([400, 'validation_failed'])
      // So is a recall of a project's facts with no project (not the user's facts instead).
      const recallNoProject = await server.request('POST', '/api/commands/memory.recall', {
        token: alice.token,
        body: { entrance: 'button', params: { query: 'fact', scope: 'project' } },
      })
      expect([recallNoProject.status, recallNoProject.body.code]).toEqual([400, 'validation_failed'])
      // A user memory belongs to no project: naming one with it is a mistake, not something to drop.
      const userWithProject = await create({ text: 'fact', scope: 'user', projectId: aliceProject })
      expect([userWithProject.status, userWithProject.body.code]).toEqual([400, 'validation_failed'])
      expect(userWithProject.body.detail).toMatch(/projectId/)
      const notMine = await create({ text: 'fact', projectId: bobProject })
      expect(notMine.status).toBe(404)
      expect((await server.request('GET', '/api/memories/not-an-id', { token: alice.token })).status).toBe(400)
      const paged = await server.request('GET', '/api/memories?q=fact&cursor=garbage', { token: alice.token })
      expect([paged.status, paged.body.code]).toEqual([400, 'validation_failed'])
    })

    it('project memories are seen by the project’s members, not by others; isolated runs recall nothing', async () => {
      const fact = await server.request('POST', '/api/memories', {
        token: alice.token,
        body: { projectId: aliceProject, key: 'deploy-day', text: 'Deploys of this project happen on Thursdays.' },
      })
      expect(fact.status).toBe(201)
      expect(fact.body).toMatchObject({ scope: 'project', projectId: aliceProject })
      expect((await server.request('GET', `/api/memories/${fact.body.id}`, { token: bob.token })).status).toBe(404)

      // Bob becomes a member (the rdm plugin's sharing): now he sees it, and his runs there recall it.
      const add = await server.request('POST', '/api/commands/rdm.member.add', {
        token: alice.token,
        body: { entrance: 'button', projectId: aliceProject, params: { userId: bob.user.id } },
      })
      expect(add.status).toBe(202)
      await server.request('POST', `/api/decisions/${add.body.decision.id}`, {
        token: alice.token,
        body: { decision: 'approve' },
      })
      const seen = await server.request('GET', `/api/memories?projectId=${aliceProject}&scope=project`, {
        token: bob.token,
      })
      expect(seen.body.items.map((item: { id: string }) => item.id)).toEqual([fact.body.id])
      const bobs = await run(bob, aliceProject, 'When are deploys?', ['Thursdays.'])
      expect(recalledBlock(bobs.calls[0]!.messages)).toMatch(/Thursdays/)

      // Isolated: by the run's switch, then by the project's.
      const isolated = await run(alice, aliceProject, 'When are deploys?', ['No idea.'], { memory: { recall: false } })
      expect(recalledBlock(isolated.calls[0]!.messages)).toBeUndefined()
      const off = await server.request('PATCH', `/api/projects/${aliceProject}`, {
        token: alice.token,
        body: { memoryRecall: false },
      })
      expect([off.status, off.body.memoryRecall]).toEqual([200, false])
      const quiet = await run(alice, aliceProject, 'When are deploys?', ['No idea.'])
      expect(recalledBlock(quiet.calls[0]!.messages)).toBeUndefined()
      const asked = await run(alice, aliceProject, 'When are deploys?', ['Thursdays.'], {
        memory: { recall: true },
        knowledge: { autoInject: false },
      })
      expect(recalledBlock(asked.calls[0]!.messages)).toMatch(/Thursdays/)
    })

    it('a member’s project memory reaches the owner’s prompts only when the project opts in', async () => {
      const projectId = (
        await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'shared memory' } })
      ).body.id as string
      const add = await server.request('POST', '/api/commands/rdm.member.add', {
        token: alice.token,
        body: { entrance: 'button', projectId, params: { userId: bob.user.id } },
      })
      await server.request('POST', `/api/decisions/${add.body.decision.id}`, {
        token: alice.token,
        body: { decision: 'approve' },
      })
      // Bob, a member who may write, keeps a project fact (his agent could as well, unasked).
      const planted = await server.request('POST', '/api/memories', {
        token: bob.token,
        body: { projectId, key: 'release', text: 'Releases of this project are signed by the release bot.' },
      })
      expect(planted.status).toBe(201)
      // Alice finds it when she asks for it, but her runs do not recall it unasked.
      const found = await server.request('GET', `/api/memories?projectId=${projectId}&q=releases`, {
        token: alice.token,
      })
      expect(found.body.items.map((item: { id: string }) => item.id)).toContain(planted.body.id)
      const owners = await run(alice, projectId, 'Who signs releases?', ['Not sure.'])
      expect(recalledBlock(owners.calls[0]!.messages)).toBeUndefined()
      expect(owners.events).not.toContain('memory.recalled')
      // Bob's own runs recall his own fact.
      const bobs = await run(bob, projectId, 'Who signs releases?', ['The release bot.'])
      expect(recalledBlock(bobs.calls[0]!.messages)).toMatch(/release bot/)
      // The project opts in to members' items in its prompts: now Alice's runs recall it too.
      const optIn = await server.request('PATCH', `/api/projects/${projectId}`, {
        token: alice.token,
        body: { injectMemberKnowledge: true },
      })
      expect(optIn.status).toBe(200)
      const after = await run(alice, projectId, 'Who signs releases?', ['The release bot.'])
      expect(recalledBlock(after.calls[0]!.messages)).toMatch(/release bot/)
    })
  })
}
