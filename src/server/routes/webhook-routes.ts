import { Type } from 'typebox'
import { caller } from '../auth.js'
import { decodeCursor, toListAnswer } from '../cursor.js'
import { runIdempotent } from '../idempotency.js'
import { IdParams, PageOf, PageQuery, problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'
import {
  DeliveryParams,
  Webhook,
  WebhookCreate,
  WebhookDelivery,
  WebhookParams,
  WebhookPatch,
  WebhookWithSecret,
} from '../webhook-schemas.js'

const tags = ['webhooks']
const problem = Type.Ref('Problem')

/** A project's webhooks (docs/webhooks.md): its owner's alone. */
export function registerWebhookRoutes(app: App, deps: ServerDeps): void {
  const { webhooks, store } = deps
  const page = (query: { limit?: number; cursor?: string }) => ({
    limit: query.limit ?? 50,
    after: decodeCursor(query.cursor),
  })

  app.post(
    '/projects/:id/webhooks',
    {
      schema: {
        operationId: 'createWebhook',
        tags,
        summary: 'Subscribe a URL to events of the project; the answer holds the signing secret, shown this once',
        params: IdParams,
        body: WebhookCreate,
        response: { 201: WebhookWithSecret, ...problemResponses, 409: problem },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const { url, events, description } = request.body
      const input = { url, events, ...(description !== undefined && { description }) }
      // With an Idempotency-Key only the webhook's id is kept with the key: its secret is not stored twice.
      const insert = await webhooks.prepare(user, request.params.id, input)
      const created = await runIdempotent(request, reply, store, user.id, 201, insert, {
        store: (webhook) => ({ id: webhook.id }),
        replay: (kept) => webhooks.withSecret(user, request.params.id, (kept as { id: string }).id),
      })
      return reply.send(created)
    },
  )

  app.get(
    '/projects/:id/webhooks',
    {
      schema: {
        operationId: 'listWebhooks',
        tags,
        summary: "The project's webhooks, newest first (never their secrets)",
        params: IdParams,
        querystring: PageQuery,
        response: { 200: PageOf(Webhook), ...problemResponses },
      },
    },
    async (request) =>
      toListAnswer(await webhooks.list(caller(request), request.params.id, page(request.query)), (webhook) => webhook),
  )

  app.get(
    '/projects/:id/webhooks/:webhookId',
    {
      schema: {
        operationId: 'getWebhook',
        tags,
        summary: 'A webhook (never its secret)',
        params: WebhookParams,
        response: { 200: Webhook, ...problemResponses },
      },
    },
    async (request) => webhooks.get(caller(request), request.params.id, request.params.webhookId),
  )

  app.patch(
    '/projects/:id/webhooks/:webhookId',
    {
      schema: {
        operationId: 'updateWebhook',
        tags,
        summary:
          'Change a webhook’s URL, events or description; enable or disable it (enabling clears its failure record)',
        params: WebhookParams,
        body: WebhookPatch,
        response: { 200: Webhook, ...problemResponses },
      },
    },
    async (request) => {
      const { url, events, description, enabled } = request.body
      return webhooks.update(caller(request), request.params.id, request.params.webhookId, {
        ...(url !== undefined && { url }),
        ...(events !== undefined && { events }),
        ...(description !== undefined && { description }),
        ...(enabled !== undefined && { enabled }),
      })
    },
  )

  app.delete(
    '/projects/:id/webhooks/:webhookId',
    {
      schema: {
        operationId: 'deleteWebhook',
        tags,
        summary: 'Delete a webhook with its delivery log (nothing more is sent)',
        params: WebhookParams,
        response: { 204: Type.Null(), ...problemResponses },
      },
    },
    async (request, reply) => {
      await webhooks.remove(caller(request), request.params.id, request.params.webhookId)
      return reply.code(204).send(null)
    },
  )

  app.post(
    '/projects/:id/webhooks/:webhookId/rotate-secret',
    {
      schema: {
        operationId: 'rotateWebhookSecret',
        tags,
        summary:
          'A new signing secret, shown this once; messages carry a signature by the old one too for the grace period (PLINTH_WEBHOOK_SECRET_GRACE)',
        params: WebhookParams,
        response: { 200: WebhookWithSecret, ...problemResponses },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const { id, webhookId } = request.params
      // With an Idempotency-Key a retry answers the rotation it made (the secret is not stored with the key).
      const rotate = await webhooks.prepareRotation(user, id, webhookId)
      const rotated = await runIdempotent(request, reply, store, user.id, 200, rotate, {
        store: (webhook) => ({ id: webhook.id }),
        replay: (kept) => webhooks.withSecret(user, id, (kept as { id: string }).id),
      })
      return reply.send(rotated)
    },
  )

  app.get(
    '/projects/:id/webhooks/:webhookId/deliveries',
    {
      schema: {
        operationId: 'listWebhookDeliveries',
        tags,
        summary:
          'The delivery log: messages newest first, each with its attempts (status code, duration, error, next attempt)',
        params: WebhookParams,
        querystring: PageQuery,
        response: { 200: PageOf(WebhookDelivery), ...problemResponses },
      },
    },
    async (request) =>
      toListAnswer(
        await webhooks.deliveries(caller(request), request.params.id, request.params.webhookId, page(request.query)),
        (delivery) => delivery,
      ),
  )

  app.get(
    '/projects/:id/webhooks/:webhookId/deliveries/:deliveryId',
    {
      schema: {
        operationId: 'getWebhookDelivery',
        tags,
        summary: 'One message of the delivery log, with its attempts',
        params: DeliveryParams,
        response: { 200: WebhookDelivery, ...problemResponses },
      },
    },
    async (request) =>
      webhooks.delivery(caller(request), request.params.id, request.params.webhookId, request.params.deliveryId),
  )

  app.post(
    '/projects/:id/webhooks/:webhookId/deliveries/:deliveryId/redeliver',
    {
      schema: {
        operationId: 'redeliverWebhookMessage',
        tags,
        summary: 'Send a message again (same body and webhook-id) with a fresh retry window',
        params: DeliveryParams,
        response: { 202: WebhookDelivery, ...problemResponses, 409: problem },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const { id, webhookId, deliveryId } = request.params
      // With an Idempotency-Key a retry answers the message as it is now instead of sending it again.
      const redeliver = await webhooks.prepareRedelivery(user, id, webhookId, deliveryId)
      const delivery = await runIdempotent(request, reply, store, user.id, 202, redeliver, {
        store: (redelivered) => ({ id: redelivered.id }),
        replay: (kept) => webhooks.delivery(user, id, webhookId, (kept as { id: string }).id),
      })
      if (reply.getHeader('idempotent-replayed') === undefined) webhooks.nudge()
      return reply.send(delivery)
    },
  )
}
