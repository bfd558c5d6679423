import { createHmac, randomBytes } from 'node:crypto'

const prefix = 'whsec_'

/** A new signing secret: `whsec_` + base64 of 32 random bytes (Standard Webhooks' form). */
export function newSecret(): string {
  return prefix + randomBytes(32).toString('base64')
}

/** The key a secret signs with: its base64 part, decoded. */
function keyOf(secret: string): Buffer {
  return Buffer.from(secret.startsWith(prefix) ? secret.slice(prefix.length) : secret, 'base64')
}

/** `v1,<base64 HMAC-SHA256 of id.timestamp.body>` under each secret, space-separated (Standard Webhooks). */
export function signatureHeader(secrets: readonly string[], id: string, timestamp: number, body: string): string {
  return secrets
    .map((secret) => `v1,${createHmac('sha256', keyOf(secret)).update(`${id}.${timestamp}.${body}`).digest('base64')}`)
    .join(' ')
}

/** The Standard Webhooks headers of one attempt. */
export function signedHeaders(
  secrets: readonly string[],
  id: string,
  body: string,
  now = Date.now(),
): Record<string, string> {
  const timestamp = Math.floor(now / 1000)
  return {
    'webhook-id': id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': signatureHeader(secrets, id, timestamp, body),
  }
}
