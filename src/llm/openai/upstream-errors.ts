import { ModelError } from '../model.js'
import { asRecord, safeParseJson } from './safe-json.js'

/** Keywords that, in a 4xx body, mean the upstream model cannot take tools (matched case-insensitively). */
export const defaultToolsUnsupportedKeywords: readonly string[] = [
  'does not support tools',
  'does not support tool use',
  'does not support function calling',
  'tools is not supported',
  'tools are not supported',
  'tools not supported',
  'tool use is not supported',
  'tool calling is not supported',
  'function calling is not supported',
  'tool choice requires',
]

/** The longest stretch of an upstream error body kept in a ModelError message. */
const maxDetailLength = 500

/**
 * Milliseconds to wait from `Retry-After` (seconds or an HTTP-date) or the non-standard `retry-after-ms`;
 * undefined when absent or unreadable.
 */
export function parseRetryAfter(headers: Headers, now: number = Date.now()): number | undefined {
  const milliseconds = headers.get('retry-after-ms')?.trim()
  if (milliseconds && /^\d+(\.\d+)?$/.test(milliseconds)) return Math.ceil(Number(milliseconds))
  const value = headers.get('retry-after')?.trim()
  if (!value) return undefined
  if (/^\d+(\.\d+)?$/.test(value)) return Math.ceil(Number(value) * 1000)
  // An HTTP-date names a weekday or month; Date.parse alone would also accept bare numbers like "-1".
  const date = /[a-z]/i.test(value) ? Date.parse(value) : Number.NaN
  return Number.isNaN(date) ? undefined : Math.max(0, date - now)
}

/** The human part of an upstream error body: `error.message`, `message`, a string `error`, or the text itself. */
export function describeErrorBody(text: string): string {
  const parsed = safeParseJson(text)
  if (parsed.ok) {
    const body = asRecord(parsed.value)
    const error = body?.error
    const nested = asRecord(error)?.message
    const message =
      typeof nested === 'string'
        ? nested
        : typeof body?.message === 'string'
          ? body.message
          : typeof error === 'string'
            ? error
            : undefined
    if (message) return truncate(message)
  }
  return truncate(text.trim().replace(/\s+/g, ' '))
}

/**
 * Maps a non-2xx upstream answer to a ModelError: a 4xx naming missing tool support → `tools_unsupported`;
 * 429 and 5xx → retryable `upstream_error` (with `retryAfterMs`); any other status (redirects included,
 * which are never followed) → non-retryable `upstream_error`.
 */
export function createHttpError(
  status: number,
  headers: Headers,
  body: string,
  toolsUnsupportedKeywords: readonly string[],
): ModelError {
  const detail = describeErrorBody(body)
  const lowered = body.toLowerCase()
  if (
    status >= 400 &&
    status < 500 &&
    toolsUnsupportedKeywords.some((keyword) => keyword && lowered.includes(keyword.toLowerCase()))
  ) {
    return new ModelError(
      'tools_unsupported',
      `The upstream model does not support tools (HTTP ${status}): ${detail}`,
      { upstreamStatus: status },
    )
  }
  if (status >= 300 && status < 400) {
    return new ModelError(
      'upstream_error',
      `Upstream answered HTTP ${status} (a redirect, not followed): check the base URL`,
      { upstreamStatus: status },
    )
  }
  const isRetryable = status === 429 || status >= 500
  return new ModelError('upstream_error', `Upstream answered HTTP ${status}${detail ? `: ${detail}` : ''}`, {
    upstreamStatus: status,
    isRetryable,
    retryAfterMs: isRetryable ? parseRetryAfter(headers) : undefined,
  })
}

/**
 * Replaces every occurrence of each secret (e.g. the API key) in `text`, and a masked echo of a long one:
 * its first half (at least 10 characters) and whatever follows up to a space or punctuation, as in
 * `sk-test-SECRE***` (an upstream masking the end only still shows most of the key).
 */
export function redactSecrets(text: string, secrets: ReadonlyArray<string | undefined>): string {
  let result = text
  for (const secret of secrets) {
    if (secret && secret.length >= 4) result = result.split(secret).join('[redacted]')
  }
  for (const secret of secrets) {
    if (!secret || secret.length < 12) continue
    const prefix = secret.slice(0, Math.max(10, Math.ceil(secret.length / 2)))
    if (result.includes(prefix))
      result = result.replace(new RegExp(`${escapeRegExp(prefix)}[^\\s"'.,;:)\\]}]*`, 'g'), '[redacted]')
  }
  return result
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

/**
 * What an upstream's error text must not show: the key, each configured header's value (where operators
 * put gateway credentials and Azure-style `api-key`s; a value of 4 characters or more, so that a tenant
 * id is hidden too), and the key without its prefix (`sk-…` quoted as `…`), since upstreams echo what
 * they were sent.
 */
export function modelSecrets(apiKey: string | undefined, headers: Record<string, string> | undefined): string[] {
  const secrets = [apiKey, ...Object.values(headers ?? {})].filter(
    (value): value is string => value !== undefined && value.length >= 4,
  )
  const withoutPrefix = secrets.flatMap((secret) => {
    const cut = secret.replace(/^[A-Za-z]{1,8}[-_](?:[A-Za-z]{1,8}[-_])?/, '')
    return cut !== secret && cut.length >= 12 ? [cut] : []
  })
  // Longest first: a secret inside another is redacted with it.
  return [...secrets, ...withoutPrefix].sort((a, b) => b.length - a.length)
}

/** The same ModelError with secrets removed from its message (the cause is dropped if it mentioned one). */
export function redactModelError(error: ModelError, secrets: ReadonlyArray<string | undefined>): ModelError {
  const message = redactSecrets(error.message, secrets)
  const cause =
    error.cause instanceof Error && redactSecrets(String(error.cause.message), secrets) !== error.cause.message
      ? undefined
      : error.cause
  if (message === error.message && cause === error.cause) return error
  return error.with({ message, cause })
}

function truncate(text: string): string {
  return text.length > maxDetailLength ? `${text.slice(0, maxDetailLength)}…` : text
}
