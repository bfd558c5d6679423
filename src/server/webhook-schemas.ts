import { Type } from 'typebox'
import { webhookEventTypes, type WebhookEventType } from '../webhooks/index.js'
import { Id } from './schemas.js'

/** Schemas of the webhook routes (docs/webhooks.md). */

const strict = { additionalProperties: false } as const
const nullable = <T extends ReturnType<typeof Type.String>>(schema: T) => Type.Union([schema, Type.Null()])
const DateTime = Type.String({ format: 'date-time' })

export const WebhookEvent = Type.Unsafe<WebhookEventType>({
  type: 'string',
  enum: [...webhookEventTypes],
  description:
    'run.completed, run.failed, run.cancelled, run.requires_action (a decision or client tool waits), decision.required, knowledge.ingested, knowledge.failed',
})

const Url = Type.String({
  minLength: 1,
  maxLength: 2048,
  description: 'Where messages are POSTed: https, and a public address unless the operator allows private ones',
})
const Events = Type.Array(WebhookEvent, { minItems: 1, maxItems: webhookEventTypes.length, uniqueItems: true })
const Description = Type.Union([Type.String({ maxLength: 500 }), Type.Null()])

const webhookFields = {
  id: Type.String(),
  projectId: Type.String(),
  url: Type.String(),
  events: Type.Array(WebhookEvent),
  description: nullable(Type.String()),
  enabled: Type.Boolean({
    description:
      'False after a run of failures (see disabledReason) or PATCH {"enabled": false}; PATCH {"enabled": true} re-enables it',
  }),
  disabledReason: nullable(Type.String()),
  disabledAt: nullable(DateTime),
  failedMessages: Type.Integer({ description: 'Messages in a row that failed for good (a success resets it)' }),
  failingSince: nullable(
    Type.String({ format: 'date-time', description: 'The first failed attempt since the last success' }),
  ),
  previousSecretUntil: nullable(
    Type.String({ format: 'date-time', description: 'After a rotation: until when the old secret signs too' }),
  ),
  createdBy: Type.String(),
  createdAt: DateTime,
  updatedAt: DateTime,
}

export const Webhook = Type.Object(webhookFields, { title: 'Webhook' })

export const WebhookWithSecret = Type.Object(
  {
    ...webhookFields,
    secret: Type.String({
      description: 'The signing secret, `whsec_` + base64 (Standard Webhooks). Shown only in this answer.',
    }),
  },
  { title: 'WebhookWithSecret' },
)

export const WebhookCreate = Type.Object({ url: Url, events: Events, description: Type.Optional(Description) }, strict)

export const WebhookPatch = Type.Object(
  {
    url: Type.Optional(Url),
    events: Type.Optional(Events),
    description: Type.Optional(Description),
    enabled: Type.Optional(Type.Boolean()),
  },
  { ...strict, minProperties: 1 },
)

export const WebhookParams = Type.Object({ id: Id, webhookId: Id }, strict)
export const DeliveryParams = Type.Object({ id: Id, webhookId: Id, deliveryId: Id }, strict)

const Attempt = Type.Object(
  {
    attempt: Type.Integer(),
    startedAt: DateTime,
    durationMs: Type.Integer(),
    statusCode: Type.Union([Type.Integer(), Type.Null()], {
      description: 'The receiver’s status; null when it did not answer',
    }),
    error: nullable(Type.String()),
    nextAttemptAt: nullable(
      Type.String({
        format: 'date-time',
        description: 'The retry this failure scheduled; null after a success or the last attempt',
      }),
    ),
  },
  { title: 'WebhookAttempt' },
)

export const WebhookDelivery = Type.Object(
  {
    id: Type.String(),
    webhookId: Type.String(),
    messageId: Type.String({
      description: 'The `webhook-id` header: the same on every attempt and redelivery (deduplicate on it)',
    }),
    eventId: Type.String({ description: 'The event’s id in the project’s stream' }),
    eventType: WebhookEvent,
    status: Type.Union([Type.Literal('pending'), Type.Literal('delivered'), Type.Literal('failed')]),
    inFlight: Type.Boolean({ description: 'An attempt is being made now' }),
    attemptCount: Type.Integer(),
    nextAttemptAt: nullable(DateTime),
    createdAt: DateTime,
    deliveredAt: nullable(DateTime),
    attempts: Type.Array(Attempt, { description: 'The latest attempts (up to 50), oldest first' }),
  },
  { title: 'WebhookDelivery' },
)
