import type { JsonSchema, JsonValue } from '../extension/index.js'

export const redactedMarker = '[redacted]'

const secretKeyPattern = /(pass(word|wd)?|secret|token|api[-_]?key|authorization|credential|private[-_]?key)/i
const secretValuePatterns = [
  /^sk-[A-Za-z0-9_-]{16,}/, // OpenAI-style keys
  /^sk-ant-[A-Za-z0-9_-]{16,}/,
  /^plt_[A-Za-z0-9_-]{32,}/, // Plinth tokens
  /^(ghp|gho|ghu|ghs|github_pat)_[A-Za-z0-9_]{20,}/,
  /^xox[abpr]-[A-Za-z0-9-]{10,}/,
  /^AKIA[0-9A-Z]{16}$/,
  /^Bearer\s+\S{16,}/i,
  /^eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+$/, // JWT
  /-----BEGIN [A-Z ]*PRIVATE KEY-----/,
]

/** Whether a string looks like a credential on its own. */
export function looksSecret(value: string): boolean {
  return secretValuePatterns.some((pattern) => pattern.test(value.trim()))
}

/**
 * A copy of `value` safe to show and store in audit: fields marked `"x-sensitive": true` in the
 * schema, fields whose names say secret, and values that look like credentials are replaced.
 */
export function redact(value: JsonValue, schema?: JsonSchema): JsonValue {
  if (typeof value === 'string') return looksSecret(value) ? redactedMarker : value
  if (Array.isArray(value)) {
    const items = schema && typeof schema.items === 'object' ? (schema.items as JsonSchema) : undefined
    return value.map((item) => redact(item, items))
  }
  if (value === null || typeof value !== 'object') return value
  const properties = (schema?.properties ?? {}) as Record<string, JsonSchema>
  const out: { [key: string]: JsonValue } = {}
  for (const [key, item] of Object.entries(value)) {
    const property = properties[key]
    if (property?.['x-sensitive'] === true || (secretKeyPattern.test(key) && item !== null && typeof item !== 'object' && typeof item !== 'boolean')) {
      out[key] = redactedMarker
    } else {
      out[key] = redact(item, property)
    }
  }
  return out
}

/** Shortens long JSON for the audit envelope; the hash of the full value is stored beside it. */
export function truncateForAudit(value: JsonValue, maxBytes = 16 * 1024): JsonValue {
  const text = JSON.stringify(value)
  if (text === undefined || Buffer.byteLength(text) <= maxBytes) return value
  return { truncated: true, bytes: Buffer.byteLength(text), preview: text.slice(0, maxBytes) }
}
