/** Signed webhooks from a transactional outbox (docs/webhooks.md): subscriptions, the delivery worker, SSRF rules. */
export {
  WebhookService,
  checkWebhookUrl,
  type WebhookInput,
  type WebhookChange,
  type WebhookWithSecret,
} from './webhook-service.js'
export { WebhookDeliverer, type DelivererOptions, type WebhookLog } from './deliverer.js'
export { defaultWebhookSettings, webhookLimits, type WebhookSettings } from './settings.js'
export { nonPublicReason, publicOnlyLookup } from './address-policy.js'
export { newSecret, signatureHeader, signedHeaders } from './signature.js'
export { retryDelay } from './retry-schedule.js'
export { webhookEventTypes, type WebhookEventType, type WebhookRecord, type DeliveryRecord } from '../store/index.js'
