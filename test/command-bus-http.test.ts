import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { verifyAuditChain } from '../src/cmdbus/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { openSse } from './helpers/sse-client.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { recordFigures } from './reliability/figures.js'
import { sql, testDb } from '../src/store/test-access.js'

for (const engine of apiEngines()) {
  describe(`command bus over HTTP on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let alice: TestUser
    let bob: TestUser
    let projectId: string
    let conversationId: string

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { plugins: ['rdm'] })
      alice = await server.createUser()
      bob = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'ops' } })).body.id
      conversationId = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    const dispatch = (
      token: string,
      commandId: string,
      body: Record<string, unknown>,
      headers?: Record<string, string>,
    ) => server.request('POST', `/api/commands/${commandId}`, { token, body, headers })

    it('lists the catalog with core and rdm commands', async () => {
      const catalog = await server.request('GET', '/api/commands', { token: alice.token })
      expect(catalog.status).toBe(200)
      const byId = Object.fromEntries(catalog.body.items.map((item: { id: string }) => [item.id, item]))
      expect(Object.keys(byId)).toEqual(
        expect.arrayContaining([
          'core.list_projects',
          'rdm.ping',
          'rdm.trace',
          'rdm.baseline',
          'rdm.draft.compose',
          'rdm.member.add',
          'rdm.member.remove',
          'rdm.member.list',
        ]),
      )
      expect(byId['rdm.ping']).toMatchObject({ risk: 'low', exposeAsTool: { name: 'rdm__ping' }, plugin: 'rdm' })
      // Paged by id with ?limit= and ?cursor=: the pages together are the whole catalog, in order.
      const ids: string[] = []
      let cursor: string | null = null
      do {
        const page: { status: number; body: { items: Array<{ id: string }>; nextCursor: string | null } } =
          await server.request('GET', `/api/commands?limit=3${cursor ? `&cursor=${cursor}` : ''}`, {
            token: alice.token,
          })
        expect(page.body.items.length).toBeLessThanOrEqual(3)
        ids.push(...page.body.items.map((item) => item.id))
        cursor = page.body.nextCursor
      } while (cursor)
      expect(ids).toEqual(Object.keys(byId).sort())
      const bad = await server.request('GET', '/api/commands?cursor=abc', { token: alice.token })
      expect([bad.status, bad.body.code]).toEqual([400, 'invalid_cursor'])
      expect(byId['rdm.draft.compose']).toMatchObject({
        risk: 'high',
        confirm: true,
        exposeAsTool: { name: 'rdm__draft__compose' },
      })
      expect(byId['rdm.member.add'].exposeAsTool).toBeNull()
    })

    it('runs rdm.ping from a button (200) and audits it with one envelope', async () => {
      const answer = await dispatch(alice.token, 'rdm.ping', {
        entrance: 'button',
        params: { target: 'db-1' },
        projectId,
      })
      expect(answer.status).toBe(200)
      expect(answer.body).toMatchObject({ status: 'succeeded', result: { pong: true, target: 'db-1' } })
      const audit = await server.request('GET', `/api/audit?commandId=rdm.ping&entrance=button`, { token: alice.token })
      const envelope = audit.body.items.find((item: { id: string }) => item.id === answer.body.dispatchId)
      expect(envelope).toMatchObject({
        commandId: 'rdm.ping',
        plugin: 'rdm',
        pluginVersion: '1.0.0',
        entrance: 'button',
        actor: { type: 'user', id: alice.user.id, onBehalfOf: alice.user.id },
        projectId,
        params: { target: 'db-1' },
        risk: 'low',
        status: 'succeeded',
        result: { pong: true, target: 'db-1' },
        decision: { outcome: 'approved', via: 'risk' },
        error: null,
      })
      expect(envelope.resultHash).toMatch(/^[0-9a-f]{64}$/)
      expect(envelope.paramsHash).toMatch(/^[0-9a-f]{64}$/)
      expect(envelope.history.map((step: { step: string }) => step.step)).toEqual(['requested', 'running', 'finished'])
    })

    it('parses slash text into params with one parser, and refuses unbalanced quotes', async () => {
      const ok = await dispatch(alice.token, 'rdm.ping', { entrance: 'slash', text: '/rdm.ping target="two words"' })
      expect(ok.status).toBe(200)
      expect(ok.body.result.target).toBe('two words')
      const positional = await dispatch(alice.token, 'rdm.ping', {
        entrance: 'slash',
        text: '/rdm.ping "positional value"',
      })
      expect(positional.body.result.target).toBe('positional value')
      const unbalanced = await dispatch(alice.token, 'rdm.ping', { entrance: 'slash', text: '/rdm.ping target="oops' })
      expect(unbalanced.status).toBe(400)
      expect(unbalanced.body.code).toBe('invalid_slash_command')
      const wrongCommand = await dispatch(alice.token, 'rdm.ping', { entrance: 'slash', text: '/rdm.trace traceId=x' })
      expect(wrongCommand.body.code).toBe('invalid_slash_command')
      // params or text: both at once is refused rather than one silently dropped.
      const both = await dispatch(alice.token, 'rdm.ping', {
        entrance: 'slash',
        params: { target: 'a' },
        text: '/rdm.ping target=b',
      })
      expect([both.status, both.body.code]).toEqual([400, 'validation_failed'])
    })

    it('answers bad dispatches with clean problems: unknown command, bad params, agent entrance, foreign conversation', async () => {
      const unknown = await dispatch(alice.token, 'rdm.nope', { entrance: 'button' })
      expect([unknown.status, unknown.body.code]).toEqual([404, 'unknown_command'])
      const badParams = await dispatch(alice.token, 'rdm.trace', {
        entrance: 'button',
        params: { traceId: 42, extra: true },
      })
      expect(badParams.status).toBe(400)
      expect(badParams.body.code).toBe('validation_failed')
      expect(badParams.body.errors.map((error: { path: string }) => error.path).sort()).toEqual(
        expect.arrayContaining(['params.traceId']),
      )
      const agent = await dispatch(alice.token, 'rdm.ping', { entrance: 'agent' })
      expect([agent.status, agent.body.code]).toEqual([422, 'entrance_not_allowed'])
      const foreign = await dispatch(bob.token, 'rdm.ping', { entrance: 'button', conversationId })
      expect([foreign.status, foreign.body.code]).toEqual([404, 'not_found'])
      const foreignProject = await dispatch(bob.token, 'rdm.ping', { entrance: 'button', projectId })
      expect([foreignProject.status, foreignProject.body.code]).toEqual([404, 'not_found'])
      const noProject = await dispatch(alice.token, 'rdm.member.list', { entrance: 'button' })
      expect([noProject.status, noProject.body.code, noProject.body.commandCode]).toEqual([
        422,
        'command_error',
        'project_required',
      ])
    })

    it('replays a dispatch with the same Idempotency-Key and refuses different params with 422', async () => {
      const headers = { 'idempotency-key': `ping-${engine}` }
      const first = await dispatch(alice.token, 'rdm.ping', { entrance: 'button', params: { target: 'a' } }, headers)
      const again = await dispatch(alice.token, 'rdm.ping', { entrance: 'button', params: { target: 'a' } }, headers)
      expect(again.body).toEqual(first.body)
      expect(again.headers.get('idempotent-replayed')).toBe('true')
      const different = await dispatch(
        alice.token,
        'rdm.ping',
        { entrance: 'button', params: { target: 'b' } },
        headers,
      )
      expect([different.status, different.body.code]).toEqual([422, 'idempotency_key_reused'])
      const dispatches = await testDb(store)
        .selectFrom('dispatches')
        .select('id')
        .where('idempotency_key', '=', headers['idempotency-key'])
        .execute()
      expect(dispatches).toHaveLength(1)
    })

    it('lists decisions in pages, newest first, each once', async () => {
      const carol = await server.createUser()
      const project = await server.request('POST', '/api/projects', { token: carol.token, body: { name: 'paged' } })
      const conversation = await server.request('POST', `/api/projects/${project.body.id}/conversations`, {
        token: carol.token,
        body: {},
      })
      const made: string[] = []
      for (let index = 0; index < 5; index++) {
        const pending = await dispatch(carol.token, 'rdm.draft.compose', {
          entrance: 'card',
          conversationId: conversation.body.id,
          params: { title: `Draft ${index}`, body: 'text' },
        })
        made.push(pending.body.decision.id as string)
      }
      const seen: string[] = []
      let cursor: string | null = null
      do {
        const page = await server.request('GET', `/api/decisions?limit=2${cursor ? `&cursor=${cursor}` : ''}`, {
          token: carol.token,
        })
        expect(page.status).toBe(200)
        expect(page.body.items.length).toBeLessThanOrEqual(2)
        seen.push(...page.body.items.map((item: { id: string }) => item.id))
        cursor = page.body.nextCursor as string | null
      } while (cursor)
      expect(seen).toEqual([...made].reverse())
    })

    it('asks before rdm.draft.compose from a card (202), runs it exactly once on approve, and audits the approver', async () => {
      const stream = await openSse(`${server.url}/api/conversations/${conversationId}/events`, { token: alice.token })
      await stream.waitFor(1)
      const pending = await dispatch(alice.token, 'rdm.draft.compose', {
        entrance: 'card',
        conversationId,
        params: { title: 'Postmortem', body: 'It was DNS.' },
      })
      expect(pending.status).toBe(202)
      expect(pending.body).toMatchObject({
        status: 'awaiting_decision',
        decision: { status: 'pending', risk: 'high', commandId: 'rdm.draft.compose', conversationId, projectId },
      })
      expect(pending.body.decision.preview).toContain('Postmortem')
      const decisionId = pending.body.decision.id as string
      const required = await stream.waitFor(2)
      expect(required[1]).toMatchObject({
        event: 'decision.required',
        data: { decisionId, commandId: 'rdm.draft.compose', risk: 'high' },
      })
      const listed = await server.request('GET', '/api/decisions?status=pending', { token: alice.token })
      expect(listed.body.items.map((item: { id: string }) => item.id)).toContain(decisionId)
      expect((await server.request('GET', '/api/decisions?status=pending', { token: bob.token })).body.items).toEqual(
        [],
      )
      // A stranger cannot answer it.
      const strangers = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: bob.token,
        body: { decision: 'approve' },
      })
      expect([strangers.status, strangers.body.code]).toEqual([404, 'not_found'])

      const approved = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'approve', note: 'ok' },
      })
      expect(approved.status).toBe(200)
      expect(approved.body.decision).toMatchObject({ status: 'approved', decidedBy: alice.user.id, scope: 'once' })
      expect(approved.body.dispatch).toMatchObject({ status: 'succeeded', result: { title: 'Postmortem', projectId } })
      const resolved = await stream.waitFor(3)
      expect(resolved[2]).toMatchObject({
        event: 'decision.resolved',
        data: { decisionId, outcome: 'approved', by: alice.user.id, scope: 'once' },
      })
      stream.close()

      // The same answer again: 200 with the stored outcome, and the command did not run again.
      const twice = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'approve' },
      })
      expect(twice.status).toBe(200)
      expect(twice.body.dispatch.result).toEqual(approved.body.dispatch.result)
      const conflict = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'reject' },
      })
      expect([conflict.status, conflict.body.code]).toEqual([409, 'decision_conflict'])
      const widened = await server.request('POST', `/api/decisions/${decisionId}`, {
        token: alice.token,
        body: { decision: 'approve_session' },
      })
      expect([widened.status, widened.body.code]).toEqual([409, 'decision_conflict'])
      // Ran once: one draft in the project's knowledge.
      const drafts = await testDb(store)
        .selectFrom('knowledge_items')
        .select(['title', 'status', 'owner_id'])
        .where('project_id', '=', projectId)
        .execute()
      expect(drafts).toEqual([{ title: 'Postmortem', status: 'draft', owner_id: alice.user.id }])

      const audit = await server.request(
        'GET',
        `/api/audit?conversationId=${conversationId}&commandId=rdm.draft.compose`,
        { token: alice.token },
      )
      const envelope = audit.body.items[0]
      expect(envelope).toMatchObject({
        entrance: 'card',
        status: 'succeeded',
        decision: { id: decisionId, outcome: 'approved', by: alice.user.id, scope: 'once', via: 'human' },
      })
      expect(envelope.history.map((step: { step: string }) => step.step)).toEqual([
        'requested',
        'awaiting_decision',
        'decided',
        'running',
        'finished',
      ])
    })

    it('runs a command once when two approvals race', async () => {
      const pending = await dispatch(alice.token, 'rdm.draft.compose', {
        entrance: 'card',
        projectId,
        params: { title: 'Race', body: 'x' },
      })
      const decisionId = pending.body.decision.id
      const answers = await Promise.all(
        [1, 2, 3].map(() =>
          server.request('POST', `/api/decisions/${decisionId}`, { token: alice.token, body: { decision: 'approve' } }),
        ),
      )
      expect(answers.map((answer) => answer.status)).toEqual([200, 200, 200])
      const runs = await testDb(store)
        .selectFrom('audit_log')
        .select('id')
        .where('dispatch_id', '=', pending.body.dispatchId)
        .where('step', '=', 'running')
        .execute()
      expect(runs).toHaveLength(1)
      const drafts = await testDb(store)
        .selectFrom('knowledge_items')
        .select('id')
        .where('project_id', '=', projectId)
        .where('title', '=', 'Race')
        .execute()
      expect(drafts).toHaveLength(1)
    })

    it('rejects: the command never runs; an expired decision answers 409 decision_expired', async () => {
      const pending = await dispatch(alice.token, 'rdm.draft.compose', {
        entrance: 'card',
        projectId,
        params: { title: 'No', body: 'x' },
      })
      const rejected = await server.request('POST', `/api/decisions/${pending.body.decision.id}`, {
        token: alice.token,
        body: { decision: 'reject' },
      })
      expect(rejected.body.decision.status).toBe('rejected')
      expect(rejected.body.dispatch.status).toBe('rejected')
      const ran = await testDb(store)
        .selectFrom('audit_log')
        .select('id')
        .where('dispatch_id', '=', pending.body.dispatchId)
        .where('step', '=', 'running')
        .execute()
      expect(ran).toHaveLength(0)

      const later = await dispatch(alice.token, 'rdm.draft.compose', {
        entrance: 'card',
        projectId,
        params: { title: 'Late', body: 'x' },
      })
      await testDb(store)
        .updateTable('decisions')
        .set({ expires_at: new Date(Date.now() - 1000) })
        .where('id', '=', later.body.decision.id)
        .execute()
      const expired = await server.request('POST', `/api/decisions/${later.body.decision.id}`, {
        token: alice.token,
        body: { decision: 'approve' },
      })
      expect([expired.status, expired.body.code]).toEqual([409, 'decision_expired'])
    })

    it('refuses approve_session for a call outside a conversation (409 scope_not_allowed); approve still runs it', async () => {
      // A medium-risk call (a confirm command is refused approve_session anywhere).
      const pending = await dispatch(alice.token, 'rdm.member.add', {
        entrance: 'button',
        projectId,
        params: { userId: 'outside' },
      })
      expect(pending.status).toBe(202)
      const session = await server.request('POST', `/api/decisions/${pending.body.decision.id}`, {
        token: alice.token,
        body: { decision: 'approve_session' },
      })
      expect([session.status, session.body.code]).toEqual([409, 'scope_not_allowed'])
      expect(session.body.detail).toMatch(/conversation/)
      const still = await server.request('GET', `/api/decisions/${pending.body.decision.id}`, { token: alice.token })
      expect(still.body.status).toBe('pending')
      const once = await server.request('POST', `/api/decisions/${pending.body.decision.id}`, {
        token: alice.token,
        body: { decision: 'approve' },
      })
      expect(once.body.decision).toMatchObject({ status: 'approved', scope: 'once' })
      expect(once.body.dispatch.status).toBe('succeeded')
    })

    it('honours permission modes and session allowances, but confirm always asks', async () => {
      const conversation = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
      // medium risk (member.add) asks in manual mode
      const manual = await dispatch(alice.token, 'rdm.member.add', {
        entrance: 'button',
        conversationId: conversation,
        params: { userId: 'nobody' },
      })
      expect(manual.status).toBe(202)
      // approve_session: the exact same call is allowed again in this conversation without asking
      await server.request('POST', `/api/decisions/${manual.body.decision.id}`, {
        token: alice.token,
        body: { decision: 'approve_session' },
      })
      const again = await dispatch(alice.token, 'rdm.member.add', {
        entrance: 'button',
        conversationId: conversation,
        params: { userId: 'nobody' },
      })
      expect(again.status).toBe(200)
      const other = await dispatch(alice.token, 'rdm.member.add', {
        entrance: 'button',
        conversationId: conversation,
        params: { userId: 'someone-else' },
      })
      expect(other.status).toBe(202)
      // risky mode: medium passes
      await server.request('PATCH', `/api/conversations/${conversation}`, {
        token: alice.token,
        body: { permissionMode: 'risky' },
      })
      expect(
        (
          await dispatch(alice.token, 'rdm.member.remove', {
            entrance: 'button',
            conversationId: conversation,
            params: { userId: 'nobody' },
          })
        ).status,
      ).toBe(200)
      // full mode: still asks for confirm: true
      await server.request('PATCH', `/api/conversations/${conversation}`, {
        token: alice.token,
        body: { permissionMode: 'full' },
      })
      expect(
        (
          await dispatch(alice.token, 'rdm.draft.compose', {
            entrance: 'button',
            conversationId: conversation,
            params: { title: 'T', body: 'b' },
          })
        ).status,
      ).toBe(202)
    })

    it('keeps the audit hash chain verifiable, and detects an altered, removed or reordered entry', async () => {
      expect((await verifyAuditChain(store)).ok).toBe(true)
      const last = await testDb(store)
        .selectFrom('audit_log')
        .select(['id', 'envelope'])
        .orderBy('id', 'desc')
        .limit(1)
        .executeTakeFirstOrThrow()
      const middle = await testDb(store)
        .selectFrom('audit_log')
        .select(['id'])
        .orderBy('id')
        .offset(3)
        .limit(1)
        .executeTakeFirstOrThrow()
      await sql`update audit_log set envelope = jsonb_set(envelope, '{status}', '"tampered"') where id = ${middle.id}`.execute(
        testDb(store),
      )
      const altered = await verifyAuditChain(store)
      expect(altered.ok).toBe(false)
      expect(altered.firstBad?.id).toBe(Number(middle.id))
      await sql`update audit_log set envelope = (select envelope from audit_log where id = ${last.id}) where id = ${middle.id}`.execute(
        testDb(store),
      )
      expect((await verifyAuditChain(store)).ok).toBe(false)
      // Removed: a later entry no longer links to the one before it.
      const before = await testDb(store)
        .selectFrom('audit_log')
        .select(['id'])
        .orderBy('id')
        .limit(1)
        .executeTakeFirstOrThrow()
      const survivors = await testDb(store)
        .selectFrom('audit_log')
        .select(['id', 'envelope'])
        .where('id', '>', before.id)
        .orderBy('id')
        .limit(2)
        .execute()
      await testDb(store).deleteFrom('audit_log').where('id', '=', survivors[0]!.id).execute()
      const removed = await verifyAuditChain(store)
      expect(removed.ok).toBe(false)
      // Named at the entry after the gap (before the altered ones).
      expect(removed.firstBad?.id).toBe(Number(survivors[1]!.id))
      recordFigures(`audit-chain-${engine}`, [
        {
          check: `Security: audit hash chain (${engine})`,
          figure: 'altered, reordered and removed entries each detected',
          goal: 'detected',
          ok: true,
        },
      ])
    })
  })
}
