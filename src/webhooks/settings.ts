/** What the operator sets for webhooks (docs/webhooks.md, "Configuration"). */
export interface WebhookSettings {
  /**
   * Deliver to loopback, private, link-local and metadata addresses, and over plain http (tests,
   * on-prem receivers). Off: https only, public addresses only.
   */
  allowPrivate: boolean
  /** The first retry's delay; each later one doubles (with jitter). */
  retryBaseMs: number
  /** How long a message is retried before it fails for good. */
  retryWindowMs: number
  /** One attempt's deadline: connect, send, answer. */
  timeoutMs: number
  /** A subscription is disabled after this many messages in a row failed for good (or failing for a retry window). */
  disableAfter: number
  /** After a rotation, how long the old secret signs too. */
  secretGraceMs: number
}

export const defaultWebhookSettings: WebhookSettings = {
  allowPrivate: false,
  retryBaseMs: 5_000,
  retryWindowMs: 24 * 60 * 60 * 1000,
  timeoutMs: 10_000,
  disableAfter: 20,
  secretGraceMs: 24 * 60 * 60 * 1000,
}

/** Fixed bounds. */
export const webhookLimits = {
  maxPerProject: 50,
  maxUrlLength: 2048,
  /** A body over this is sent with the resource's ids only (`"truncated": true`). */
  maxBodyBytes: 256 * 1024,
  /** Bytes of an answer read before the connection is dropped. */
  maxResponseBytes: 64 * 1024,
  /** Attempts in flight per instance. */
  concurrency: 32,
} as const
