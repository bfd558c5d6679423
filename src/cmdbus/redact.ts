import type { JsonSchema, JsonValue } from '../extension/index.js'

export const redactedMarker = '[redacted]'

/** Words of a key that name a secret (`password`, `clientSecret`, `X-Api-Key`, `refresh_token`). */
const secretKeyWords = new Set([
  'pass',
  'password',
  'passwd',
  'passphrase',
  'secret',
  'token',
  'apikey',
  'authorization',
  'credential',
  'credentials',
])
/** `api key`, `private key`, … as two words. */
const secretKeyPrefixes = new Set(['api', 'private', 'secret', 'access'])
/** Words that make a key a measure of something rather than the thing (`tokenCount`, `passwordHint`). */
const measureWords = new Set([
  'count',
  'max',
  'min',
  'limit',
  'budget',
  'total',
  'usage',
  'length',
  'size',
  'ttl',
  'hint',
])

/**
 * Whether a key names a secret, by its words (camelCase, snake_case and kebab-case are split), so
 * that `maxTokens`, `passage` or `compass` are left alone.
 */
function isSecretKey(key: string): boolean {
  const words = key
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z]+/)
    .filter(Boolean)
  if (words.some((word) => measureWords.has(word))) return false
  return words.some(
    (word, index) => secretKeyWords.has(word) || (word === 'key' && secretKeyPrefixes.has(words[index - 1] ?? '')),
  )
}

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

/** Credentials inside a longer text (a command line, a file's content): each is replaced on its own. */
const embeddedSecretPatterns = [
  /\bsk-(?:ant-)?[A-Za-z0-9_-]{16,}/g,
  /\bplt_[A-Za-z0-9_-]{32,}/g,
  /\b(?:ghp|gho|ghu|ghs|github_pat)_[A-Za-z0-9_]{20,}/g,
  /\bxox[abpr]-[A-Za-z0-9-]{10,}/g,
  /\bAKIA[0-9A-Z]{16}\b/g,
  /\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+/g,
  /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)/g,
]
/** A password option's value: quoted (spaces and all) or up to the next space or shell operator. */
const optionValue = String.raw`(?:'[^'\n]{0,300}'|"[^"\n]{0,300}"|[^\s"'|;&]+)`
/**
 * `Bearer <token>`, `password=…` / `PGPASSWORD=…` / `api_key: …` / `SLACK_TOKEN=…`, a URL's
 * `user:password@`, and the password options of common clients (`mysql -pX`, `sshpass -p X`, `curl -u
 * user:X`) keep their name; the value goes. Every repetition is bounded: these run over model-supplied
 * text up to megabytes long, and an unbounded one would take quadratic time on a crafted input.
 */
const embeddedSecretValues = [
  /(\bBearer\s+)[A-Za-z0-9._~+/=-]{16,}/gi,
  /(\b\w{0,60}?(?:password|passwd|passphrase|secret|api[_-]?key|access[_-]?token|auth[_-]?token)\s*[=:]\s*["']?)[^\s"'&;]{4,}/gi,
  /(\b[A-Z][A-Z0-9_]{0,60}_(?:TOKEN|PWD)\s*=\s*["']?)[^\s"'&;]{4,}/g,
  // The password runs to the last `@` before the host (a password may hold one); not past `?` or `#`.
  /(\b[a-z][a-z0-9+.-]{0,31}:\/\/[^\s/:@?#]{0,200}:)[^\s/?#]{1,300}(?=@[^\s/@?#]{0,300}(?:[/?#\s]|$))/gi,
  new RegExp(String.raw`(\b(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\n|;&]{0,300}?\s-p)${optionValue}`, 'g'),
  new RegExp(String.raw`(\bsshpass\s+-p\s*)${optionValue}`, 'g'),
  new RegExp(String.raw`(\bcurl\b[^\n|;&]{0,300}?\s(?:-u|--user)\s*["']?[^\s:"']{1,200}:)${optionValue}`, 'g'),
]

/** `text` with the credentials it holds replaced (the rest kept). */
export function redactEmbedded(text: string): string {
  let result = text
  for (const pattern of embeddedSecretPatterns) result = result.replace(pattern, redactedMarker)
  for (const pattern of embeddedSecretValues) result = result.replace(pattern, `$1${redactedMarker}`)
  return result
}

/** Whether a string looks like a credential on its own. */
export function looksSecret(value: string): boolean {
  return secretValuePatterns.some((pattern) => pattern.test(value.trim()))
}

/**
 * A copy of `value` safe to show and store in audit: fields marked `"x-sensitive": true` in the
 * schema, fields whose names say secret, and values that look like credentials are replaced.
 */
export function redact(value: JsonValue, schema?: JsonSchema): JsonValue {
  if (schema?.['x-sensitive'] === true) return redactedMarker
  if (typeof value === 'string') return looksSecret(value) ? redactedMarker : redactEmbedded(value)
  if (Array.isArray(value)) {
    const items = schema && typeof schema.items === 'object' ? (schema.items as JsonSchema) : undefined
    return value.map((item) => redact(item, items))
  }
  if (value === null || typeof value !== 'object') return value
  const properties = (schema?.properties ?? {}) as Record<string, JsonSchema>
  const out: { [key: string]: JsonValue } = {}
  for (const [key, item] of Object.entries(value)) {
    const property = properties[key]
    if (
      property?.['x-sensitive'] === true ||
      (isSecretKey(key) && item !== null && typeof item !== 'object' && typeof item !== 'boolean')
    ) {
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
  if (text === undefined) return value
  const bytes = Buffer.from(text)
  if (bytes.length <= maxBytes) return value
  // Cut on a code-point boundary: at most maxBytes of UTF-8, never half a character.
  let end = maxBytes
  while (end > 0 && ((bytes[end] as number) & 0xc0) === 0x80) end--
  return { truncated: true, bytes: bytes.length, preview: bytes.subarray(0, end).toString('utf8') }
}
