import { readdir, readFile } from 'node:fs/promises'
import { request as httpsRequest } from 'node:https'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ConfigError, loadConfig } from '../src/app/index.js'
import { ScriptedModel } from '../src/llm/index.js'
import { createProject, createUser, insertWebhook, newId, readEvents, type Store } from '../src/store/index.js'
import { testDb } from '../src/store/test-access.js'
import {
  checkWebhookUrl,
  publicOnlyLookup,
  retryDelay,
  WebhookDeliverer,
  defaultWebhookSettings,
} from '../src/webhooks/index.js'
import { createTestDatabase, openTestStore, apiEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { until, verified, WebhookReceiver } from './helpers/webhook-receiver.js'

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary JSON
type Json = Record<string, any>

// Signed webhooks from the transactional outbox (docs/webhooks.md), against real receivers verifying
// with the `standardwebhooks` package. Retries use a 100 ms base here (5 s by default).

const draft = { name: 'rdm__draft__compose', arguments: { title: 'Plan', body: 'Ship it' } }

for (const engine of apiEngines()) {
  describe(`webhooks on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let model: ScriptedModel
    let owner: TestUser
    const receivers: WebhookReceiver[] = []

    beforeAll(async () => {
      store = await openTestStore(engine)
      model = new ScriptedModel({ id: 'scripted', turns: [] })
      server = await startTestServer(store, {
        models: [model],
        plugins: ['rdm'],
        webhookDelivery: {
          allowPrivate: true,
          retryBaseMs: 100,
          retryWindowMs: 2000,
          timeoutMs: 5000,
          disableAfter: 2,
        },
      })
      owner = await server.createUser()
    })
    afterAll(async () => {
      for (const receiver of receivers) await receiver.close()
      await server?.close()
      await store?.close()
    })

    async function receiver(): Promise<WebhookReceiver> {
      const created = await new WebhookReceiver().listen()
      receivers.push(created)
      return created
    }

    async function project(): Promise<{ projectId: string; conversationId: string }> {
      const created = await server.request('POST', '/api/projects', { token: owner.token, body: { name: 'hooks' } })
      const conversation = await server.request('POST', `/api/projects/${created.body.id}/conversations`, {
        token: owner.token,
        body: {},
      })
      return { projectId: created.body.id, conversationId: conversation.body.id }
    }

    async function subscribe(
      projectId: string,
      url: string,
      events: string[],
    ): Promise<{ id: string; secret: string }> {
      const created = await server.request('POST', `/api/projects/${projectId}/webhooks`, {
        token: owner.token,
        body: { url, events, description: 'test' },
      })
      expect(created.status).toBe(201)
      return created.body
    }

    async function run(
      conversationId: string,
      turns: ConstructorParameters<typeof ScriptedModel>[0]['turns'],
    ): Promise<string> {
      model.setTurns(turns)
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs?wait=true`, {
        token: owner.token,
        body: { input: 'go', knowledge: { autoInject: false } },
      })
      expect(created.status).toBe(201)
      return created.body.id
    }

    const deliveries = (projectId: string, webhookId: string) =>
      server
        .request('GET', `/api/projects/${projectId}/webhooks/${webhookId}/deliveries`, { token: owner.token })
        .then((answer) => answer.body.items as Json[])

    it('answered 500 twice then 200: three signed attempts with one webhook-id, one success, all in the delivery log', async () => {
      const hook = await receiver()
      hook.respond = (_request, all) => (all.length <= 2 ? 500 : 200)
      const { projectId, conversationId } = await project()
      const webhook = await subscribe(projectId, hook.url(), ['run.completed'])
      expect(webhook.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
      expect(Buffer.from(webhook.secret.slice(6), 'base64').length).toBeGreaterThanOrEqual(24)
      const runId = await run(conversationId, [{ text: 'All good.' }])

      const received = await hook.waitFor(3)
      const payloads = received.map((request) => verified(webhook.secret, request))
      expect(new Set(received.map((request) => request.headers['webhook-id'])).size).toBe(1)
      expect(received[0]!.headers['webhook-id']).toMatch(/^msg_[0-9A-HJKMNP-TV-Z]{26}$/)
      for (const payload of payloads)
        expect(payload).toMatchObject({
          type: 'run.completed',
          data: { id: runId, status: 'completed', conversationId, projectId },
        })
      // The body is the same bytes every time (rendered once); the retries waited about 100 and 200 ms.
      expect(new Set(received.map((request) => request.body)).size).toBe(1)
      expect(received[1]!.at - received[0]!.at).toBeGreaterThanOrEqual(70)
      expect(received[2]!.at - received[1]!.at).toBeGreaterThanOrEqual(150)

      const [delivery] = await until(
        () => deliveries(projectId, webhook.id),
        (items) => items[0]?.status === 'delivered',
      )
      expect(delivery).toMatchObject({
        status: 'delivered',
        eventType: 'run.completed',
        attemptCount: 3,
        messageId: received[0]!.headers['webhook-id'],
        nextAttemptAt: null,
      })
      expect(delivery!.attempts.map((attempt: { statusCode: number }) => attempt.statusCode)).toEqual([500, 500, 200])
      expect(delivery!.attempts[0]).toMatchObject({
        attempt: 1,
        error: 'answered 500',
        nextAttemptAt: expect.any(String),
      })
      expect(delivery!.attempts[2]).toMatchObject({ attempt: 3, error: null, nextAttemptAt: null })
      expect(delivery!.attempts[2].durationMs).toBeGreaterThanOrEqual(0)
      // Nothing more arrives (an absence, so a fixed while is the assertion's window).
      await new Promise((resolve) => setTimeout(resolve, 500))
      expect(hook.received).toHaveLength(3)
      // One delivery: GET by id; the list and GET never show the secret.
      const one = await server.request(
        'GET',
        `/api/projects/${projectId}/webhooks/${webhook.id}/deliveries/${delivery!.id}`,
        { token: owner.token },
      )
      expect(one.body).toMatchObject({ id: delivery!.id, status: 'delivered' })
      // A well-formed id no delivery has, its row number past a bigint: 404, like any unknown one.
      for (const suffix of ['', '/redeliver'])
        expect(
          (
            await server.request(
              suffix ? 'POST' : 'GET',
              `/api/projects/${projectId}/webhooks/${webhook.id}/deliveries/7ZZZZZZZZZZZZZZZZZZZZZZZZZ${suffix}`,
              { token: owner.token },
            )
          ).status,
        ).toBe(404)
      const listed = await server.request('GET', `/api/projects/${projectId}/webhooks`, { token: owner.token })
      expect(listed.body.items).toHaveLength(1)
      expect(JSON.stringify(listed.body)).not.toContain(webhook.secret.slice(6, 20))
      const got = await server.request('GET', `/api/projects/${projectId}/webhooks/${webhook.id}`, {
        token: owner.token,
      })
      expect(got.body).not.toHaveProperty('secret')
      expect(got.body).toMatchObject({
        url: hook.url(),
        events: ['run.completed'],
        enabled: true,
        failedMessages: 0,
        failingSince: null,
      })
    })

    it('run.requires_action, decision.required and knowledge.ingested carry the run, the decision and the item as the API shows them', async () => {
      const hook = await receiver()
      const { projectId, conversationId } = await project()
      const webhook = await subscribe(projectId, hook.url(), [
        'run.requires_action',
        'decision.required',
        'knowledge.ingested',
        'run.failed',
      ])
      const runId = await run(conversationId, [{ toolCalls: [draft] }, { text: 'done' }])
      const received = await hook.waitFor(2)
      const byType = Object.fromEntries(
        received.map((request) => verified(webhook.secret, request)).map((payload) => [payload.type, payload]),
      )
      const apiRun = (await server.request('GET', `/api/runs/${runId}`, { token: owner.token })).body
      expect(byType['run.requires_action']!.data).toMatchObject({
        id: runId,
        status: 'requires_action',
        requiredAction: apiRun.requiredAction,
      })
      const decisionId = apiRun.requiredAction.decisions[0].decisionId
      const apiDecision = (await server.request('GET', `/api/decisions/${decisionId}`, { token: owner.token })).body
      expect(byType['decision.required']!.data).toEqual(apiDecision)
      expect(Date.parse(byType['decision.required']!.timestamp)).toBeGreaterThan(Date.now() - 60_000)

      const item = await server.request('POST', `/api/projects/${projectId}/knowledge`, {
        token: owner.token,
        body: { title: 'Notes', text: 'Some notes about the plan.' },
      })
      expect(item.status).toBe(201)
      const third = await hook.waitFor(3)
      const ingested = verified(webhook.secret, third[2]!)
      const asStored = (await server.request('GET', `/api/knowledge/${item.body.id}`, { token: owner.token })).body
      expect(ingested.data).not.toHaveProperty('shared')
      expect(ingested).toMatchObject({
        type: 'knowledge.ingested',
        data: { id: item.body.id, ingestStatus: 'ready', title: 'Notes' },
      })
      for (const key of ['id', 'projectId', 'ownerId', 'title', 'status', 'ingestStatus'])
        expect(ingested.data[key]).toEqual(asStored[key])
      // Not subscribed: nothing for run.completed once the decision is answered.
      await server.request('POST', `/api/decisions/${decisionId}`, { token: owner.token, body: { decision: 'reject' } })
      await until(
        () => server.request('GET', `/api/runs/${runId}`, { token: owner.token }),
        (answer) => answer.body.status === 'completed',
      )
      // An absence (no run.completed delivery): a fixed while is the assertion's window.
      await new Promise((resolve) => setTimeout(resolve, 300))
      expect(hook.received.map((request) => JSON.parse(request.body).type).sort()).toEqual([
        'decision.required',
        'knowledge.ingested',
        'run.requires_action',
      ])
    })

    it('a redirect is not followed: the 3xx fails the attempt and its target is never asked', async () => {
      const target = await receiver()
      const hook = await receiver()
      hook.respond = (_request, all) =>
        all.length <= 2 ? { status: 307, headers: { location: target.url('/elsewhere') } } : 200
      const { projectId, conversationId } = await project()
      const webhook = await subscribe(projectId, hook.url(), ['run.completed'])
      await run(conversationId, [{ text: 'ok' }])
      const [delivery] = await until(
        () => deliveries(projectId, webhook.id),
        (items) => items[0]?.status === 'delivered',
      )
      expect(
        delivery!.attempts.map((attempt: { statusCode: number; error: string | null }) => [
          attempt.statusCode,
          attempt.error,
        ]),
      ).toEqual([
        [307, 'answered 307: redirects are not followed'],
        [307, 'answered 307: redirects are not followed'],
        [200, null],
      ])
      expect(target.received).toHaveLength(0)
    })

    it('rotating the secret while a delivery is in flight: that attempt verifies with the old secret, the retry with old and new alike', async () => {
      const hook = await receiver()
      let answered = 0
      hook.respond = () => (answered++ === 0 ? 'hang' : 200)
      const { projectId, conversationId } = await project()
      const webhook = await subscribe(projectId, hook.url(), ['run.completed'])
      await run(conversationId, [{ text: 'ok' }])
      const [inFlight] = await hook.waitFor(1)
      const [during] = await until(
        () => deliveries(projectId, webhook.id),
        (items) => items[0]?.inFlight === true,
      )
      expect(during).toMatchObject({ status: 'pending', inFlight: true })
      const rotated = await server.request('POST', `/api/projects/${projectId}/webhooks/${webhook.id}/rotate-secret`, {
        token: owner.token,
      })
      expect(rotated.status).toBe(200)
      expect(rotated.body.secret).toMatch(/^whsec_/)
      expect(rotated.body.secret).not.toBe(webhook.secret)
      expect(Date.parse(rotated.body.previousSecretUntil)).toBeGreaterThan(Date.now() + 3_600_000)
      // Signed before the rotation: the old secret only.
      expect(verified(webhook.secret, inFlight!).type).toBe('run.completed')
      expect(() => verified(rotated.body.secret, inFlight!)).toThrow()
      hook.release(500)
      const [, retry] = await hook.waitFor(2)
      expect(retry!.headers['webhook-signature']!.split(' ')).toHaveLength(2)
      expect(verified(webhook.secret, retry!).type).toBe('run.completed')
      expect(verified(rotated.body.secret, retry!).type).toBe('run.completed')
      expect(retry!.headers['webhook-id']).toBe(inFlight!.headers['webhook-id'])
      const [delivery] = await until(
        () => deliveries(projectId, webhook.id),
        (items) => items[0]?.status === 'delivered',
      )
      expect(delivery!.attempts.map((attempt: { statusCode: number }) => attempt.statusCode)).toEqual([500, 200])
    })

    it('messages that keep failing give up after the retry window; two in a row disable the webhook with a webhook.disabled event; re-enable and redeliver', async () => {
      const hook = await receiver()
      hook.respond = () => 503
      const { projectId, conversationId } = await project()
      const webhook = await subscribe(projectId, hook.url(), ['run.completed'])
      await run(conversationId, [{ text: 'one' }])
      await until(
        () => deliveries(projectId, webhook.id),
        (items) => items[0]?.status === 'failed',
      )
      await run(conversationId, [{ text: 'two' }])
      const failed = await until(
        () => deliveries(projectId, webhook.id),
        (items) => items.length === 2 && items.every((item) => item.status === 'failed'),
      )
      expect(failed[0]!.attempts.at(-1)).toMatchObject({ statusCode: 503, nextAttemptAt: null })
      const disabled = await until(
        () => server.request('GET', `/api/projects/${projectId}/webhooks/${webhook.id}`, { token: owner.token }),
        (answer) => answer.body.enabled === false,
      )
      expect(disabled.body).toMatchObject({
        enabled: false,
        failedMessages: 2,
        disabledReason: '2 messages in a row failed',
        failingSince: expect.any(String),
      })
      const events = (await readEvents(store, { projectId }, 0, 1000)).filter(
        (event) => event.type === 'webhook.disabled',
      )
      expect(events).toHaveLength(1)
      expect(events[0]!.data).toEqual({ webhookId: webhook.id, url: hook.url(), reason: '2 messages in a row failed' })
      // While disabled: no messages for new events, and redelivery is refused.
      await run(conversationId, [{ text: 'three' }])
      expect(await deliveries(projectId, webhook.id)).toHaveLength(2)
      const refused = await server.request(
        'POST',
        `/api/projects/${projectId}/webhooks/${webhook.id}/deliveries/${failed[0]!.id}/redeliver`,
        { token: owner.token },
      )
      expect([refused.status, refused.body.code]).toEqual([409, 'webhook_disabled'])
      // Re-enabled: its record is cleared, and a redelivery sends the same message again.
      const enabled = await server.request('PATCH', `/api/projects/${projectId}/webhooks/${webhook.id}`, {
        token: owner.token,
        body: { enabled: true },
      })
      expect(enabled.body).toMatchObject({ enabled: true, failedMessages: 0, failingSince: null, disabledReason: null })
      hook.respond = () => 200
      const before = hook.received.length
      const redeliver = () =>
        server.request(
          'POST',
          `/api/projects/${projectId}/webhooks/${webhook.id}/deliveries/${failed[0]!.id}/redeliver`,
          { token: owner.token, headers: { 'idempotency-key': 'redeliver-1' } },
        )
      const redelivered = await redeliver()
      expect(redelivered.status).toBe(202)
      const again = await until(
        () =>
          server.request('GET', `/api/projects/${projectId}/webhooks/${webhook.id}/deliveries/${failed[0]!.id}`, {
            token: owner.token,
          }),
        (answer) => answer.body.status === 'delivered',
      )
      expect(hook.received.length).toBe(before + 1)
      expect(hook.received.at(-1)!.headers['webhook-id']).toBe(failed[0]!.messageId)
      expect(verified(webhook.secret, hook.received.at(-1)!).type).toBe('run.completed')
      expect(again.body.attempts.at(-1)).toMatchObject({ statusCode: 200 })
      // A retry with the same key answers the message as it is now; it is not made pending again.
      const retried = await redeliver()
      expect(retried.status).toBe(202)
      expect(retried.headers.get('idempotent-replayed')).toBe('true')
      expect(retried.body).toMatchObject({ id: failed[0]!.id, status: 'delivered' })
      const after = await server.request(
        'GET',
        `/api/projects/${projectId}/webhooks/${webhook.id}/deliveries/${failed[0]!.id}`,
        { token: owner.token },
      )
      expect(after.body.status).toBe('delivered')
      expect(after.body.attempts).toHaveLength(again.body.attempts.length)
      // Disabled since: the retry is still the replay, not a 409.
      await server.request('PATCH', `/api/projects/${projectId}/webhooks/${webhook.id}`, {
        token: owner.token,
        body: { enabled: false },
      })
      const late = await redeliver()
      expect([late.status, late.headers.get('idempotent-replayed')]).toEqual([202, 'true'])
    })

    it('bad input is problem+json with a stable code; other projects and unknown ids are 404', async () => {
      const { projectId } = await project()
      const post = (body: unknown) =>
        server.request('POST', `/api/projects/${projectId}/webhooks`, { token: owner.token, body })
      const cases: Array<[unknown, number, string]> = [
        [{ url: 'not a url', events: ['run.completed'] }, 400, 'invalid_webhook_url'],
        [{ url: 'ftp://example.com/hook', events: ['run.completed'] }, 400, 'invalid_webhook_url'],
        [{ url: 'https://user:pass@example.com/hook', events: ['run.completed'] }, 400, 'invalid_webhook_url'],
        [{ url: `https://example.com/${'a'.repeat(2100)}`, events: ['run.completed'] }, 400, 'validation_failed'],
        [{ url: 'https://example.com/hook', events: ['run.exploded'] }, 400, 'validation_failed'],
        [{ url: 'https://example.com/hook', events: [] }, 400, 'validation_failed'],
        [{ url: 'https://example.com/hook', events: ['run.completed'], secret: 'mine' }, 400, 'validation_failed'],
      ]
      for (const [body, status, code] of cases) {
        const answer = await post(body)
        expect([answer.status, answer.body.code], JSON.stringify(body).slice(0, 100)).toEqual([status, code])
        expect(answer.headers.get('content-type')).toContain('application/problem+json')
      }
      const patch = await server.request('PATCH', `/api/projects/${projectId}/webhooks/${newId()}`, {
        token: owner.token,
        body: { enabled: true },
      })
      expect([patch.status, patch.body.code]).toEqual([404, 'not_found'])
      const badCursor = await server.request('GET', `/api/projects/${projectId}/webhooks?cursor=nope`, {
        token: owner.token,
      })
      expect([badCursor.status, badCursor.body.code]).toEqual([400, 'invalid_cursor'])
    })

    it('creating with an Idempotency-Key makes one webhook; a retry gets it again, secret included', async () => {
      const hook = await receiver()
      const { projectId } = await project()
      const create = (key: string, url = hook.url('/idem')) =>
        server.request('POST', `/api/projects/${projectId}/webhooks`, {
          token: owner.token,
          headers: { 'idempotency-key': key },
          body: { url, events: ['run.completed'] },
        })
      const first = await create('wh-1')
      expect(first.status).toBe(201)
      const again = await create('wh-1')
      expect(again.status).toBe(201)
      expect(again.headers.get('idempotent-replayed')).toBe('true')
      expect(again.body).toMatchObject({ id: first.body.id, secret: first.body.secret })
      const listed = await server.request('GET', `/api/projects/${projectId}/webhooks`, { token: owner.token })
      expect(listed.body.items).toHaveLength(1)
      // The same key with another request is refused; the key is not the secret's keeper.
      expect((await create('wh-1', hook.url('/other'))).status).toBe(422)
      const [record] = await testDb(store)
        .selectFrom('idempotency_keys')
        .select('response')
        .where('key', '=', 'wh-1')
        .execute()
      expect(JSON.stringify(record?.response)).not.toContain('whsec_')
    })

    it('rotating with an Idempotency-Key rotates once: a retry answers the same new secret, the original still signs', async () => {
      const hook = await receiver()
      const { projectId } = await project()
      const webhook = await subscribe(projectId, hook.url('/rotate'), ['run.completed'])
      const rotate = (key: string) =>
        server.request('POST', `/api/projects/${projectId}/webhooks/${webhook.id}/rotate-secret`, {
          token: owner.token,
          headers: { 'idempotency-key': key },
        })
      const first = await rotate('rot-1')
      expect(first.status).toBe(200)
      const again = await rotate('rot-1')
      expect(again.status).toBe(200)
      expect(again.headers.get('idempotent-replayed')).toBe('true')
      expect(again.body.secret).toBe(first.body.secret)
      // Rotated once: the secret from before is still the previous one, so its receivers keep verifying.
      const [row] = await testDb(store)
        .selectFrom('webhooks')
        .select(['secret', 'previous_secret'])
        .where('id', '=', webhook.id)
        .execute()
      expect(row).toEqual({ secret: first.body.secret, previous_secret: webhook.secret })
      const [record] = await testDb(store)
        .selectFrom('idempotency_keys')
        .select('response')
        .where('key', '=', 'rot-1')
        .execute()
      expect(JSON.stringify(record?.response)).not.toContain('whsec_')
      // Another webhook with the same key is another request.
      const other = await subscribe(projectId, hook.url('/rotate-other'), ['run.completed'])
      const reused = await server.request('POST', `/api/projects/${projectId}/webhooks/${other.id}/rotate-secret`, {
        token: owner.token,
        headers: { 'idempotency-key': 'rot-1' },
      })
      expect([reused.status, reused.body.code]).toEqual([422, 'idempotency_key_reused'])
      // A new key rotates again.
      const next = await rotate('rot-2')
      expect(next.body.secret).not.toBe(first.body.secret)
    })

    it('lists are paginated with cursor and limit; DELETE stops deliveries', async () => {
      const hook = await receiver()
      const { projectId, conversationId } = await project()
      const ids: string[] = []
      for (let index = 0; index < 3; index++)
        ids.push((await subscribe(projectId, hook.url(`/h${index}`), ['run.completed'])).id)
      const first = await server.request('GET', `/api/projects/${projectId}/webhooks?limit=2`, { token: owner.token })
      expect(first.body.items.map((item: { id: string }) => item.id)).toEqual([ids[2], ids[1]])
      const second = await server.request(
        'GET',
        `/api/projects/${projectId}/webhooks?limit=2&cursor=${first.body.nextCursor}`,
        { token: owner.token },
      )
      expect(second.body).toMatchObject({ items: [{ id: ids[0] }], nextCursor: null })
      await run(conversationId, [{ text: 'a' }])
      await run(conversationId, [{ text: 'b' }])
      await hook.waitFor(6)
      const page = await server.request('GET', `/api/projects/${projectId}/webhooks/${ids[0]}/deliveries?limit=1`, {
        token: owner.token,
      })
      const rest = await server.request(
        'GET',
        `/api/projects/${projectId}/webhooks/${ids[0]}/deliveries?limit=1&cursor=${page.body.nextCursor}`,
        { token: owner.token },
      )
      expect(page.body.items).toHaveLength(1)
      expect(rest.body).toMatchObject({ items: [expect.any(Object)], nextCursor: null })
      expect(rest.body.items[0].id < page.body.items[0].id).toBe(true)
      for (const id of ids)
        expect(
          (await server.request('DELETE', `/api/projects/${projectId}/webhooks/${id}`, { token: owner.token })).status,
        ).toBe(204)
      await run(conversationId, [{ text: 'c' }])
      // An absence (deleted webhooks get nothing): a fixed while is the assertion's window.
      await new Promise((resolve) => setTimeout(resolve, 300))
      expect(hook.received).toHaveLength(6)
      expect(
        (await server.request('GET', `/api/projects/${projectId}/webhooks/${ids[0]}`, { token: owner.token })).status,
      ).toBe(404)
    })
  })

  describe(`webhook URLs without PLINTH_WEBHOOK_ALLOW_PRIVATE on ${engine}`, () => {
    let store: Store
    let server: TestServer
    let owner: TestUser
    let projectId: string

    beforeAll(async () => {
      store = await openTestStore(engine)
      server = await startTestServer(store, { webhookDelivery: { timeoutMs: 2000 } })
      owner = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: owner.token, body: { name: 'strict' } })).body
        .id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    it('refuses http, loopback, private, link-local, CGNAT, metadata and localhost URLs at creation (400 webhook_url_not_allowed)', async () => {
      const refused = [
        'https://127.0.0.1/hook',
        'https://127.1/hook',
        'https://[::1]/hook',
        'https://[::ffff:127.0.0.1]/hook',
        'https://[::127.0.0.1]/hook',
        'https://[::ffff:0:10.0.0.1]/hook',
        'https://[64:ff9b::a9fe:a9fe]/hook',
        'https://10.1.2.3/hook',
        'https://192.168.1.1/hook',
        'https://172.16.0.9/hook',
        'https://100.64.0.1/hook',
        'https://169.254.169.254/latest/meta-data',
        'https://[fd00:ec2::254]/hook',
        'https://[fe80::1]/hook',
        'https://224.0.0.1/hook',
        'https://0.0.0.0/hook',
        'https://localhost/hook',
        'https://api.localhost/hook',
        'http://example.com/hook',
      ]
      for (const url of refused) {
        const answer = await server.request('POST', `/api/projects/${projectId}/webhooks`, {
          token: owner.token,
          body: { url, events: ['run.completed'] },
        })
        expect([answer.status, answer.body.code], url).toEqual([400, 'webhook_url_not_allowed'])
      }
      const allowed = await server.request('POST', `/api/projects/${projectId}/webhooks`, {
        token: owner.token,
        body: { url: 'https://example.com/hook', events: ['run.completed'] },
      })
      expect(allowed.status).toBe(201)
      expect(checkWebhookUrl('https://8.8.8.8/x', false)).toBe('https://8.8.8.8/x')
    })

    it('checks the address a name resolves to when it connects: a name resolving to loopback fails the attempt (DNS rebinding)', async () => {
      // A subscription whose name resolved publicly when it was made, and to this host now.
      const webhookId = newId()
      await insertWebhook(
        store,
        {
          id: webhookId,
          projectId,
          url: 'https://localhost:9/hook',
          events: ['knowledge.ingested'],
          description: null,
          secret: 'whsec_' + Buffer.alloc(32, 1).toString('base64'),
          createdBy: owner.user.id,
        },
        50,
      )
      const item = await server.request('POST', `/api/projects/${projectId}/knowledge`, {
        token: owner.token,
        body: { title: 't', text: 'text' },
      })
      expect(item.status).toBe(201)
      const items = await until(
        () =>
          server
            .request('GET', `/api/projects/${projectId}/webhooks/${webhookId}/deliveries`, { token: owner.token })
            .then((answer) => answer.body.items as Json[]),
        (list) => (list[0]?.attempts.length ?? 0) > 0,
      )
      expect(items[0]!.attempts[0].statusCode).toBeNull()
      expect(items[0]!.attempts[0].error).toMatch(
        /localhost resolves to a loopback address (127\.0\.0\.1|::1); webhooks may only reach public addresses/,
      )
      // The lookup itself, as any https request would use it.
      const error = await new Promise<NodeJS.ErrnoException>((resolve) => {
        const request = httpsRequest('https://localhost:9/', { lookup: publicOnlyLookup() })
        request.on('error', resolve)
        request.end()
      })
      expect(error.code).toBe('WEBHOOK_ADDRESS_NOT_ALLOWED')
    })
  })
}

describe.skipIf(!apiEngines().includes('postgres'))('two deliverers on one Postgres', () => {
  it(
    'share the outbox: every message is delivered exactly once, whichever instance claims it',
    { timeout: 120_000 },
    async () => {
      const database = await createTestDatabase('postgres')
      const stores = [await database.open(), await database.open()]
      const hook = await new WebhookReceiver().listen()
      const deliverers = stores.map(
        (store) => new WebhookDeliverer(store, { ...defaultWebhookSettings, allowPrivate: true, retryBaseMs: 100 }),
      )
      try {
        const [first, second] = stores as [Store, Store]
        const owner = await createUser(first, `two-${Date.now()}`)
        if ('error' in owner) throw new Error('user')
        const project = await first.transaction((tx) => createProject(tx, owner.id, { name: 'two' }))
        const secret = 'whsec_' + Buffer.alloc(32, 3).toString('base64')
        await insertWebhook(
          first,
          {
            id: newId(),
            projectId: project.id,
            url: hook.url(),
            events: ['run.completed'],
            description: null,
            secret,
            createdBy: owner.id,
          },
          50,
        )
        // One in ten answers fails once, so retries are claimed too.
        hook.respond = (request, all) =>
          all.filter((other) => other.headers['webhook-id'] === request.headers['webhook-id']).length === 1 &&
          all.length % 10 === 0
            ? 500
            : 200
        for (const deliverer of deliverers) await deliverer.start()
        const count = 60
        for (let n = 0; n < count; n++)
          await (n % 2 === 0 ? first : second).appendEvents([
            { type: 'run.completed', projectId: project.id, data: { runId: `r${n}`, n } },
          ])
        await until(
          async () =>
            new Set(
              hook.received
                .filter((request) => verified(secret, request))
                .map((request) => request.headers['webhook-id']),
            ).size,
          (delivered) => delivered === count,
        )
        // An absence (no second delivery of a message): a fixed while is the assertion's window.
        await new Promise((resolve) => setTimeout(resolve, 500))
        const successes = new Map<string, number>()
        hook.received.forEach((request, index) => {
          const id = request.headers['webhook-id']!
          const failed =
            hook.received.slice(0, index + 1).filter((other) => other.headers['webhook-id'] === id).length === 1 &&
            (index + 1) % 10 === 0
          if (!failed) successes.set(id, (successes.get(id) ?? 0) + 1)
        })
        expect(successes.size).toBe(count)
        expect([...successes.values()].every((times) => times === 1)).toBe(true)
        const payloads = hook.received.map((request) => verified(secret, request).data.n as number)
        expect(new Set(payloads).size).toBe(count)
      } finally {
        for (const deliverer of deliverers) await deliverer.stop()
        await hook.close()
        for (const store of stores) await store.close()
        await database.drop()
      }
    },
  )
})

describe('webhook internals', () => {
  it('every statement that inserts events also writes the outbox', async () => {
    const dir = new URL('../src/store/', import.meta.url)
    for (const name of await readdir(dir)) {
      if (!name.endsWith('.ts')) continue
      const text = await readFile(new URL(name, dir), 'utf8')
      const inserts = text.match(/insert into events \(/g)?.length ?? 0
      const outboxes = text.match(/outbox(After|Cte)\(events|outboxAfter\(run\.events/g)?.length ?? 0
      expect(outboxes, name).toBeGreaterThanOrEqual(inserts)
    }
  })

  it('retries back off exponentially with jitter from the base (≈5 s first by default)', () => {
    expect(retryDelay(1, defaultWebhookSettings.retryBaseMs, () => 0.5)).toBe(5000)
    expect(retryDelay(2, 5000, () => 0.5)).toBe(10_000)
    expect(retryDelay(1, 5000, () => 0)).toBe(4000)
    expect(retryDelay(1, 5000, () => 1)).toBeCloseTo(6000)
    // The default schedule fits about 14 retries into the 24 h window.
    let total = 0
    let attempts = 1
    while (total + retryDelay(attempts, 5000, () => 0.5) <= defaultWebhookSettings.retryWindowMs)
      total += retryDelay(attempts++, 5000, () => 0.5)
    expect(attempts).toBe(15)
  })

  it('configuration: environment durations and flags, file keys, defaults', () => {
    const cwd = mkdtempSync(join(tmpdir(), 'plinth-hook-config-'))
    // Unset: nothing in the configuration; the server fills in defaultWebhookSettings.
    expect(loadConfig({}, cwd).webhooks).toEqual({})
    const set = loadConfig(
      {
        PLINTH_WEBHOOK_RETRY_BASE: '250ms',
        PLINTH_WEBHOOK_ALLOW_PRIVATE: '1',
        PLINTH_WEBHOOK_TIMEOUT: '3s',
        PLINTH_WEBHOOK_RETRY_WINDOW: '1h',
        PLINTH_WEBHOOK_DISABLE_AFTER: '5',
        PLINTH_WEBHOOK_SECRET_GRACE: '10m',
      },
      cwd,
    )
    expect(set.webhooks).toEqual({
      retryBaseMs: 250,
      allowPrivate: true,
      timeoutMs: 3000,
      retryWindowMs: 3_600_000,
      disableAfter: 5,
      secretGraceMs: 600_000,
    })
    expect(() => loadConfig({ PLINTH_WEBHOOK_RETRY_BASE: 'soon' }, cwd)).toThrow(ConfigError)
  })

  it('a deliverer stops cleanly without having claimed anything', async () => {
    const store = await openTestStore('pglite')
    const deliverer = new WebhookDeliverer(store, defaultWebhookSettings)
    await deliverer.start()
    await deliverer.stop()
    await store.close()
  })
})
