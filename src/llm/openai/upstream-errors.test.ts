import { describe, expect, it } from 'vitest'
import { ModelError } from '../model.js'
import { safeParseJson } from './safe-json.js'
import {
  createHttpError,
  defaultToolsUnsupportedKeywords,
  describeErrorBody,
  parseRetryAfter,
  redactModelError,
} from './upstream-errors.js'

describe('parseRetryAfter', () => {
  const now = Date.parse('2025-01-01T00:00:00Z')
  it('reads seconds, fractions, HTTP-dates and retry-after-ms', () => {
    expect(parseRetryAfter(new Headers({ 'retry-after': '3' }), now)).toBe(3000)
    expect(parseRetryAfter(new Headers({ 'retry-after': '0.5' }), now)).toBe(500)
    expect(parseRetryAfter(new Headers({ 'retry-after': 'Wed, 01 Jan 2025 00:00:10 GMT' }), now)).toBe(10_000)
    expect(parseRetryAfter(new Headers({ 'retry-after': 'Tue, 31 Dec 2024 23:59:00 GMT' }), now)).toBe(0)
    expect(parseRetryAfter(new Headers({ 'retry-after-ms': '1234', 'retry-after': '9' }), now)).toBe(1234)
  })
  it('is undefined when absent or unreadable', () => {
    expect(parseRetryAfter(new Headers(), now)).toBeUndefined()
    expect(parseRetryAfter(new Headers({ 'retry-after': 'soon' }), now)).toBeUndefined()
    expect(parseRetryAfter(new Headers({ 'retry-after': '-1' }), now)).toBeUndefined()
  })
})

describe('createHttpError', () => {
  const keywords = defaultToolsUnsupportedKeywords
  it('classifies statuses', () => {
    expect(createHttpError(429, new Headers({ 'retry-after': '1' }), '', keywords)).toMatchObject({
      code: 'upstream_error',
      upstreamStatus: 429,
      isRetryable: true,
      retryAfterMs: 1000,
    })
    expect(createHttpError(500, new Headers(), 'oops', keywords)).toMatchObject({
      code: 'upstream_error',
      isRetryable: true,
      retryAfterMs: undefined,
    })
    expect(createHttpError(404, new Headers({ 'retry-after': '1' }), 'no such model', keywords)).toMatchObject({
      code: 'upstream_error',
      isRetryable: false,
      retryAfterMs: undefined,
    })
    expect(
      createHttpError(400, new Headers(), '{"error":{"message":"Tools are not supported"}}', keywords),
    ).toMatchObject({ code: 'tools_unsupported', upstreamStatus: 400 })
    // Only a 4xx names missing tool support; a 5xx mentioning tools is still an outage.
    expect(createHttpError(500, new Headers(), 'tools not supported', keywords)).toMatchObject({
      code: 'upstream_error',
      isRetryable: true,
    })
    expect(createHttpError(400, new Headers(), 'tools not supported', [])).toMatchObject({
      code: 'upstream_error',
      isRetryable: false,
    })
  })
})

describe('describeErrorBody', () => {
  it('prefers the JSON error message and bounds the length', () => {
    expect(describeErrorBody('{"error":{"message":"m1"}}')).toBe('m1')
    expect(describeErrorBody('{"message":"m2"}')).toBe('m2')
    expect(describeErrorBody('{"error":"m3"}')).toBe('m3')
    expect(describeErrorBody('<html>\n  Bad   gateway</html>')).toBe('<html> Bad gateway</html>')
    expect(describeErrorBody('x'.repeat(2000)).length).toBeLessThanOrEqual(501)
  })
})

describe('safeParseJson', () => {
  it('never throws', () => {
    expect(safeParseJson('{"a":1}')).toEqual({ ok: true, value: { a: 1 } })
    expect(safeParseJson('{"a":')).toEqual({ ok: false })
  })
})

describe('redactModelError', () => {
  it('removes secrets from the message and keeps the fields', () => {
    const error = new ModelError('upstream_error', 'bad key sk-123456', { upstreamStatus: 401, isRetryable: false })
    const redacted = redactModelError(error, ['sk-123456', undefined])
    expect(redacted.message).toBe('bad key [redacted]')
    expect(redacted).toMatchObject({ code: 'upstream_error', upstreamStatus: 401, isRetryable: false })
    const clean = new ModelError('timeout', 'quiet')
    expect(redactModelError(clean, ['sk-123456'])).toBe(clean)
  })
})
