import { ScriptedModel } from '../src/llm/index.js'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { pino } from 'pino'
import { setUpCommandBus } from '../src/app/index.js'
import { SurfaceVersion } from '../src/extension/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { openSse } from './helpers/sse-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { testDb } from '../src/store/test-access.js'
import { waitForRun } from './helpers/waits.js'

const fixture = (name: string): string => new URL(`./__fixtures__/plugins/${name}.ts`, import.meta.url).pathname

describe('plugin loading', () => {
  let store: Store
  beforeAll(async () => {
    store = await openTestStore('pglite')
  })
  afterAll(async () => store?.close())

  it('refuses a plugin that throws, needs another surface, registers a malformed id or a colliding tool name — and loads the rest', async () => {
    const lines: Array<{ msg: string; plugin?: string }> = []
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) })
    const setup = await setUpCommandBus(store, {
      plugins: [
        'rdm',
        fixture('throwing'),
        fixture('incompatible'),
        fixture('bad-id'),
        fixture('collide'),
        'no-such-plugin-package',
      ],
      logger,
      actionTtlMs: 60_000,
      allowanceTtlMs: 60_000,
      dataDir: '/tmp/plinth-unused-data',
    })
    expect(setup.plugins.map((plugin) => plugin.name)).toEqual(['rdm'])
    const ids = setup.catalog.list().map((command) => command.spec.id)
    expect(ids).toContain('rdm.ping')
    // Nothing of a refused plugin is registered, not even its valid commands.
    expect(ids.filter((id) => /^(incompatible|badid|collide)\./.test(id))).toEqual([])
    const refusals = lines.filter((line) => line.msg.includes('refused'))
    expect(refusals.map((line) => line.msg)).toEqual([
      expect.stringMatching(/throwing.*cannot reach its backend/),
      expect.stringMatching(new RegExp(`incompatible.*\\^2\\.0\\.0.*${SurfaceVersion.replaceAll('.', '\\.')}`)),
      expect.stringMatching(/bad-id.*malformed command id "BadId\.Ping"/),
      expect.stringMatching(/collide.*collides with rdm\.ping/),
      expect.stringMatching(/no-such-plugin-package/),
    ])
  })
})

describe('a misbehaving plugin', () => {
  let store: Store
  let server: TestServer
  let user: TestUser
  const logged: Array<{ msg: string; level: number; code?: string; status?: number }> = []
  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      plugins: [fixture('misbehaving')],
      logger: pino({ level: 'info' }, { write: (line: string) => void logged.push(JSON.parse(line)) }),
    })
    user = await server.createUser()
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('gives the caller a clean error, audits the failure and keeps serving', async () => {
    const thrown = await server.request('POST', '/api/commands/misbehaving.throws', {
      token: user.token,
      body: { entrance: 'button' },
    })
    expect([thrown.status, thrown.body.code]).toEqual([502, 'command_failed'])
    expect(JSON.stringify(thrown.body)).not.toContain('secret internal detail')
    const refused = await server.request('POST', '/api/commands/misbehaving.refuses', {
      token: user.token,
      body: { entrance: 'button' },
    })
    expect([refused.status, refused.body.code, refused.body.commandCode]).toEqual([
      422,
      'command_error',
      'quota_exceeded',
    ])
    const hung = await server.request('POST', '/api/commands/misbehaving.hangs', {
      token: user.token,
      body: { entrance: 'button' },
    })
    expect([hung.status, hung.body.code]).toEqual([504, 'command_timeout'])
    // An answer the server chose (504 here, 503 overloaded, 507 quota) is no server fault: a warning
    // naming the code, with no stack.
    const timeouts = logged.filter((line) => line.code === 'command_timeout')
    expect(timeouts).toEqual([expect.objectContaining({ level: 40, msg: 'request refused', status: 504 })])
    expect(JSON.stringify(timeouts)).not.toContain('"stack"')
    const audit = await server.request('GET', '/api/audit', { token: user.token })
    const statuses = Object.fromEntries(
      audit.body.items.map((item: { commandId: string; status: string; error: { code: string } }) => [
        item.commandId,
        [item.status, item.error?.code],
      ]),
    )
    expect(statuses).toMatchObject({
      'misbehaving.throws': ['failed', 'command_failed'],
      'misbehaving.refuses': ['failed', 'quota_exceeded'],
      // The audit and the model read the code the client gets.
      'misbehaving.hangs': ['failed', 'command_timeout'],
    })
    expect((await server.request('GET', '/healthz')).status).toBe(200)
  })

  it('redacts x-sensitive params and secret-looking values in the audit envelope', async () => {
    const answer = await server.request('POST', '/api/commands/misbehaving.secret', {
      token: user.token,
      body: { entrance: 'button', params: { apiKey: 'hunter2-but-long', note: 'hello' } },
    })
    expect(answer.status).toBe(200)
    const audit = await server.request('GET', '/api/audit?commandId=misbehaving.secret', { token: user.token })
    expect(audit.body.items[0].params).toEqual({ apiKey: '[redacted]', note: 'hello' })
    expect(audit.body.items[0].result).toEqual({ echoed: 'hello', token: '[redacted]' })
    const raw = await testDb(store).selectFrom('audit_log').select('envelope').execute()
    expect(JSON.stringify(raw)).not.toContain('hunter2-but-long')
  })
})

for (const engine of apiEngines()) {
  describe(`project sharing through the rdm ProjectAuthz adapter on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let owner: TestUser
    let member: TestUser
    let stranger: TestUser
    let projectId: string

    beforeAll(async () => {
      store = await openTestStore(engine)
      // A slow model: a run goes on long enough for its owner's access to be taken away meanwhile.
      server = await startTestServer(store, {
        plugins: ['rdm', new URL('./__fixtures__/plugins/emitter.ts', import.meta.url).pathname],
        models: [
          new ScriptedModel({
            id: 'slow',
            turns: [
              { text: Array.from({ length: 100 }, (_, index) => `w${index}`).join(' '), chunks: 100, delayMs: 100 },
            ],
            whenExhausted: 'loop',
          }),
          new ScriptedModel({ id: 'quick', turns: [{ text: 'a private answer' }], whenExhausted: 'loop' }),
          // A model whose call waits for a person (drafts are always confirmed).
          new ScriptedModel({
            id: 'asks',
            turns: [
              { toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'Plan', body: 'b' } }] },
              { text: 'done' },
            ],
            whenExhausted: 'loop',
          }),
        ],
      })
      owner = await server.createUser()
      member = await server.createUser()
      stranger = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: owner.token, body: { name: 'shared one' } }))
        .body.id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    /** The owner approves what asked (adding or removing a member is medium risk). */
    const approve = async (answer: { status: number; body: { decision?: { id: string } } }) => {
      if (answer.status === 202)
        await server.request('POST', `/api/decisions/${answer.body.decision!.id}`, {
          token: owner.token,
          body: { decision: 'approve' },
        })
    }
    /** A member in the project, and a conversation of theirs there. */
    const memberConversation = async (): Promise<string> => {
      await approve(await add(owner.token, member.user.id))
      return (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: member.token, body: {} })
      ).body.id
    }
    const add = (token: string, userId: string) =>
      server.request('POST', '/api/commands/rdm.member.add', {
        token,
        body: { entrance: 'button', projectId, params: { userId } },
      })

    it('shares a project with a member until they are removed; the grant is audited', async () => {
      expect((await server.request('GET', `/api/projects/${projectId}`, { token: member.token })).status).toBe(404)
      const added = await add(owner.token, member.user.id)
      // Adding members is medium risk: approve it.
      expect(added.status).toBe(202)
      await server.request('POST', `/api/decisions/${added.body.decision.id}`, {
        token: owner.token,
        body: { decision: 'approve' },
      })

      const list = await server.request('GET', '/api/projects', { token: member.token })
      expect(list.body.items).toEqual([
        expect.objectContaining({ id: projectId, shared: true, ownerId: owner.user.id }),
      ])
      expect(
        (await server.request('GET', '/api/projects', { token: owner.token })).body.items.filter(
          (item: { id: string }) => item.id === projectId,
        ),
      ).toEqual([expect.objectContaining({ shared: false })])
      // The member creates a conversation there; it is theirs.
      const conversation = await server.request('POST', `/api/projects/${projectId}/conversations`, {
        token: member.token,
        body: { title: 'mine' },
      })
      expect(conversation.status).toBe(201)
      expect(conversation.body.ownerId).toBe(member.user.id)
      // The member sees their own conversations only, and cannot delete the project.
      await server.request('POST', `/api/projects/${projectId}/conversations`, {
        token: owner.token,
        body: { title: 'owners' },
      })
      const conversations = await server.request('GET', `/api/projects/${projectId}/conversations`, {
        token: member.token,
      })
      expect(conversations.body.items.map((item: { title: string }) => item.title)).toEqual(['mine'])
      expect((await server.request('DELETE', `/api/projects/${projectId}`, { token: member.token })).status).toBe(403)
      // A member may not manage members.
      const memberAdds = await add(member.token, stranger.user.id)
      expect(memberAdds.status).toBe(202)
      const refused = await server.request('POST', `/api/decisions/${memberAdds.body.decision.id}`, {
        token: member.token,
        body: { decision: 'approve' },
      })
      expect(refused.body.dispatch).toMatchObject({ status: 'failed', error: { code: 'forbidden' } })
      // The member's project stream: project-level events and their own conversation, not the owner's.
      const stream = await openSse(`${server.url}/api/projects/${projectId}/events`, { token: member.token })
      const events = await stream.waitFor(4)
      // Nothing of the owner's trails in: an absence, so a short fixed while is the assertion's window.
      await new Promise((resolve) => setTimeout(resolve, 200))
      stream.close()
      // project.created, the member's conversation, and the member's own decision — nothing of the owner's.
      expect(events.map((event) => event.event)).toEqual([
        'project.created',
        'conversation.created',
        'decision.required',
        'decision.resolved',
      ])
      expect(events[1]!.data.conversation.ownerId).toBe(member.user.id)
      expect(events[2]!.data.params.userId).toBe(stranger.user.id)
      // The stranger sees nothing.
      expect((await server.request('GET', `/api/projects/${projectId}`, { token: stranger.token })).status).toBe(404)
      expect((await server.request('GET', '/api/projects', { token: stranger.token })).body.items).toEqual([])
      // The grant is in the audit log.
      const audit = await server.request('GET', `/api/audit?commandId=rdm.member.add&projectId=${projectId}`, {
        token: owner.token,
      })
      expect(
        audit.body.items.some(
          (item: { status: string; params: { userId: string } }) =>
            item.status === 'succeeded' && item.params.userId === member.user.id,
        ),
      ).toBe(true)

      // Removal applies on the next request.
      const removed = await server.request('POST', '/api/commands/rdm.member.remove', {
        token: owner.token,
        body: { entrance: 'button', projectId, params: { userId: member.user.id } },
      })
      await server.request('POST', `/api/decisions/${removed.body.decision.id}`, {
        token: owner.token,
        body: { decision: 'approve' },
      })
      expect((await server.request('GET', `/api/projects/${projectId}`, { token: member.token })).status).toBe(404)
      expect((await server.request('GET', '/api/projects', { token: member.token })).body.items).toEqual([])
      expect(
        (await server.request('GET', `/api/conversations/${conversation.body.id}`, { token: member.token })).status,
      ).toBe(404)
    })

    it('a member’s conversation stays off the project owner’s stream, as it is off their lists (404)', async () => {
      const conversation = await memberConversation()
      const run = await server.request('POST', `/api/conversations/${conversation}/runs?wait=true`, {
        token: member.token,
        body: { input: 'something private', model: 'quick' },
      })
      expect(run.body.status).toBe('completed')
      // The owner's stream from the start of the log; their own conversation afterwards marks its end.
      const stream = await openSse(`${server.url}/api/projects/${projectId}/events?after=0`, { token: owner.token })
      const own = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, {
          token: owner.token,
          body: { title: 'the owner’s' },
        })
      ).body.id
      await stream.waitForEvent((event) => event.event === 'conversation.created' && event.data.conversation.id === own)
      stream.close()
      const seen = stream.events.filter((event) => JSON.stringify(event.data).includes(conversation))
      expect(seen.map((event) => event.event)).toEqual([])
      expect(JSON.stringify(stream.events)).not.toContain('a private answer')
      // The member still sees their own conversation on the same stream.
      const members = await openSse(`${server.url}/api/projects/${projectId}/events?after=0`, { token: member.token })
      await members.waitForEvent((event) => event.event === 'run.completed' && event.data.runId === run.body.id)
      members.close()
      expect((await server.request('GET', `/api/conversations/${conversation}`, { token: owner.token })).status).toBe(
        404,
      )
      // A plugin's event about the member's conversation is the member's too.
      const noted = await server.request('POST', '/api/commands/emitter.note', {
        token: member.token,
        body: { entrance: 'button', conversationId: conversation, params: { note: 'for the member' } },
      })
      expect(noted.status).toBe(200)
      const membersAgain = await openSse(`${server.url}/api/projects/${projectId}/events?after=0`, {
        token: member.token,
      })
      await membersAgain.waitForEvent((event) => event.event === 'plugin.emitter.noted')
      membersAgain.close()
      const ownersAgain = await openSse(`${server.url}/api/projects/${projectId}/events?after=0`, {
        token: owner.token,
      })
      const marker = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: owner.token, body: {} })
      ).body.id
      await ownersAgain.waitForEvent(
        (event) => event.event === 'conversation.created' && event.data.conversation.id === marker,
      )
      ownersAgain.close()
      expect(ownersAgain.events.map((event) => event.event)).not.toContain('plugin.emitter.noted')
    })

    // Regression (docs/security.md#smaller-findings): a run whose owner lost access to the project kept
    // calling the model.
    it('ends a member’s running run (cancelled, access_revoked) when they are removed from the project', async () => {
      const conversation = await memberConversation()
      const run = (
        await server.request('POST', `/api/conversations/${conversation}/runs`, {
          token: member.token,
          body: { input: 'talk for a while' },
        })
      ).body
      await approve(
        await server.request('POST', '/api/commands/rdm.member.remove', {
          token: owner.token,
          body: { entrance: 'button', projectId, params: { userId: member.user.id } },
        }),
      )
      const deadline = Date.now() + 15_000
      let ended: { status: string; cancelReason?: string } | undefined
      while (Date.now() < deadline) {
        const row = await testDb(store)
          .selectFrom('runs')
          .select(['status', 'cancel_reason'])
          .where('id', '=', run.id)
          .executeTakeFirstOrThrow()
        if (row.status !== 'running') {
          ended = { status: row.status, cancelReason: row.cancel_reason ?? undefined }
          break
        }
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      // Well before the model's 10 s answer was done.
      expect(ended).toEqual({ status: 'cancelled', cancelReason: 'access_revoked' })
      const cancelled = await testDb(store)
        .selectFrom('events')
        .select('data')
        .where('run_id', '=', run.id)
        .where('type', '=', 'run.cancelled')
        .execute()
      expect(cancelled[0]?.data).toMatchObject({ reason: 'access_revoked' })
    })

    it('a member’s waiting call is theirs to answer, and their waiting run ends when they are removed', async () => {
      const conversation = await memberConversation()
      const run = (
        await server.request('POST', `/api/conversations/${conversation}/runs`, {
          token: member.token,
          body: { input: 'draft a plan', model: 'asks' },
        })
      ).body
      const waiting = await waitForRun(server, member.token, run.id, ['requires_action'])
      const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!
        .decisionId
      // The project's owner cannot see the member's conversation, so neither its decisions.
      expect((await server.request('GET', `/api/conversations/${conversation}`, { token: owner.token })).status).toBe(
        404,
      )
      const ownerAnswers = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: owner.token,
        body: { decision: 'approve' },
      })
      expect([ownerAnswers.status, ownerAnswers.body.code]).toEqual([404, 'not_found'])
      expect((await server.request('GET', `/api/decisions/${decisionId}`, { token: owner.token })).status).toBe(404)
      const ownersList = await server.request('GET', '/api/decisions?status=pending', { token: owner.token })
      expect(ownersList.body.items.map((item: { id: string }) => item.id)).not.toContain(decisionId)
      expect((await server.request('GET', `/api/decisions/${decisionId}`, { token: member.token })).status).toBe(200)

      // Removed from the project, the member's run that waits for that answer ends too.
      await approve(
        await server.request('POST', '/api/commands/rdm.member.remove', {
          token: owner.token,
          body: { entrance: 'button', projectId, params: { userId: member.user.id } },
        }),
      )
      let ended: { status: string; cancel_reason: string | null } | undefined
      for (const deadline = Date.now() + 15_000; Date.now() < deadline;) {
        ended = await testDb(store)
          .selectFrom('runs')
          .select(['status', 'cancel_reason'])
          .where('id', '=', run.id)
          .executeTakeFirstOrThrow()
        if (ended.status !== 'requires_action') break
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      expect(ended).toEqual({ status: 'cancelled', cancel_reason: 'access_revoked' })
      const decision = await testDb(store)
        .selectFrom('decisions')
        .select('status')
        .where('id', '=', decisionId)
        .executeTakeFirstOrThrow()
      expect(decision.status).toBe('expired')
    })
  })
}

describe('without a ProjectAuthz adapter', () => {
  it('is exactly owner-only', async () => {
    const store = await openTestStore('pglite')
    const server = await startTestServer(store)
    try {
      const owner = await server.createUser()
      const other = await server.createUser()
      const project = (await server.request('POST', '/api/projects', { token: owner.token, body: { name: 'p' } })).body
      const ownerList = await server.request('GET', '/api/projects', { token: owner.token })
      expect(ownerList.body).toEqual({ items: [project], nextCursor: null })
      expect(project.shared).toBe(false)
      expect((await server.request('GET', '/api/projects', { token: other.token })).body).toEqual({
        items: [],
        nextCursor: null,
      })
      for (const path of [`/api/projects/${project.id}`, `/api/projects/${project.id}/conversations`]) {
        expect((await server.request('GET', path, { token: other.token })).status).toBe(404)
      }
      expect(
        (await server.request('POST', `/api/projects/${project.id}/conversations`, { token: other.token, body: {} }))
          .status,
      ).toBe(404)
    } finally {
      await server.close()
      await store.close()
    }
  })
})
