import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { isDatabaseUnavailable, RequestError } from '../store/index.js'
import { drainRefusedBody } from './oversize-bodies.js'
import { HttpProblem, problemBody, type ProblemCode, type ProblemField } from './problem.js'

interface ValidationIssue {
  instancePath: string
  keyword: string
  message?: string
  params: Record<string, unknown>
}

const maxReportedErrors = 20
const maxEchoedPath = 200

/** The request's path (no query string, which may hold secrets), cut to a sane length. */
export function requestPath(request: FastifyRequest): string {
  const path = request.url.split('?')[0] ?? ''
  return path.length > maxEchoedPath ? `${path.slice(0, maxEchoedPath)}…` : path
}

/** Maps every error to problem+json; never leaks a stack trace or an internal message. */
export function handleError(
  error: FastifyError | HttpProblem | Error,
  request: FastifyRequest,
  reply: FastifyReply,
): void {
  if (reply.sent || reply.raw.headersSent) return
  const { code, detail, extensions } = classify(error, request)
  const body = problemBody(code, detail, { ...extensions, instance: requestPath(request) })
  // An answer the server chose (503 overloaded, 504 command_timeout, 507 quota_exceeded) is no fault of
  // its own: a warning, without the stack, which would only point at where the answer was made.
  if (body.status >= 500) {
    if (error instanceof HttpProblem || error instanceof RequestError)
      request.log.warn({ code, status: body.status }, 'request refused')
    // A client that hung up before its body was all sent is no fault of the server's.
    else if ((error as { code?: unknown }).code === 'ECONNRESET' && !request.raw.complete)
      request.log.info({ status: body.status }, 'the client went away before its request was complete')
    else request.log.error({ err: error }, 'request failed')
  }
  // A route may have set a richer challenge (the MCP endpoint names its resource metadata).
  if (code === 'unauthorized' && !reply.hasHeader('www-authenticate')) reply.header('www-authenticate', 'Bearer')
  if (error instanceof RequestError && error.retryAfter !== undefined) reply.header('retry-after', error.retryAfter)
  if (code === 'service_unavailable' && !reply.hasHeader('retry-after')) reply.header('retry-after', 2)
  // (A streamed upload past the work directory's quota is refused mid-body the same way.)
  if ((code === 'payload_too_large' || code === 'quota_exceeded') && !request.raw.complete) {
    // Closing now would cut the client off mid-send, before it reads this answer: drain, then go on.
    reply.removeHeader('connection')
    drainRefusedBody(request.raw)
  }
  reply.code(body.status).type('application/problem+json').send(body)
}

/** A full disk: the file system's ENOSPC, or Postgres' `disk_full` (53100) and PGlite's message for it. */
function isDiskFull(error: Error): boolean {
  const code = (error as { code?: unknown }).code
  return code === 'ENOSPC' || code === '53100' || /no space left on device/i.test(error.message)
}

function classify(
  error: FastifyError | HttpProblem | Error,
  request: FastifyRequest,
): { code: ProblemCode; detail?: string; extensions?: Record<string, unknown> } {
  if (error instanceof HttpProblem) return { code: error.code, detail: error.message, extensions: error.extensions }
  // A module service's refusal (not found, forbidden, a bad field): the caller's mistake, never a 500.
  if (error instanceof RequestError)
    return {
      code: error.code,
      detail: error.message,
      extensions: { ...error.extensions, ...(error.errors && { errors: error.errors }) },
    }
  // The database restarting, failing over or out of reach: asking again shortly may succeed.
  if (isDatabaseUnavailable(error))
    return { code: 'service_unavailable', detail: 'the database is not reachable right now; try again shortly' }
  if (isDiskFull(error))
    return { code: 'storage_full', detail: 'the server is out of disk space; nothing of this request was kept' }
  const fastifyError = error as FastifyError & { validation?: ValidationIssue[]; validationContext?: string }
  if (fastifyError.validation) {
    const all = collapseAlternatives(mergeConstAlternatives(fastifyError.validation))
    // A body of thousands of bad fields gets a bounded answer: the first few, and how many there were.
    const errors = all
      .slice(0, maxReportedErrors)
      .map((issue) => describeIssue(issue, fastifyError.validationContext ?? 'body'))
    const more = all.length - errors.length
    return {
      code: 'validation_failed',
      detail: errors.map((item) => `${item.path}: ${item.message}`).join('; ') + (more > 0 ? `; and ${more} more` : ''),
      extensions: { errors, ...(more > 0 && { errorCount: all.length }) },
    }
  }
  switch (fastifyError.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return { code: 'invalid_json', detail: fastifyError.message }
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return { code: 'payload_too_large', detail: 'request body is larger than the configured limit' }
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return {
        code: 'unsupported_media_type',
        // The knowledge upload takes a multipart file too: say so there.
        detail: `content-type ${request.headers['content-type'] ?? '(none)'} is not accepted; send application/json${
          request.routeOptions.config?.multipart === true ? ' (or multipart/form-data with a file)' : ''
        }`,
      }
  }
  if (error instanceof SyntaxError) return { code: 'invalid_json', detail: 'request body is not valid JSON' }
  const status = fastifyError.statusCode ?? 500
  if (status === 429) return { code: 'rate_limited', detail: fastifyError.message }
  if (status === 404) return { code: 'not_found' }
  if (status === 405) return { code: 'method_not_allowed' }
  if (status === 406) return { code: 'not_acceptable' }
  if (status === 413) return { code: 'payload_too_large' }
  if (status === 415) return { code: 'unsupported_media_type' }
  if (status === 503) return { code: 'service_unavailable' }
  if (status >= 400 && status < 500) return { code: 'bad_request', detail: fastifyError.message }
  return { code: 'internal', detail: 'an internal error occurred; it has been logged' }
}

/**
 * A union of literals fails as one `const` issue per literal plus the `anyOf` that held them: said
 * once, as `must be one of a, b, c`.
 */
function mergeConstAlternatives(issues: readonly ValidationIssue[]): ValidationIssue[] {
  const allowed = new Map<string, unknown[]>()
  for (const issue of issues)
    if (issue.keyword === 'const')
      allowed.set(issue.instancePath, [...(allowed.get(issue.instancePath) ?? []), issue.params.allowedValue])
  if (allowed.size === 0) return [...issues]
  const merged: ValidationIssue[] = []
  const said = new Set<string>()
  for (const issue of issues) {
    const values = allowed.get(issue.instancePath)
    if (!values || (issue.keyword !== 'const' && issue.keyword !== 'anyOf')) {
      merged.push(issue)
      continue
    }
    if (said.has(issue.instancePath)) continue
    said.add(issue.instancePath)
    merged.push({ instancePath: issue.instancePath, keyword: 'enum', params: { allowedValues: values } })
  }
  return merged
}

/**
 * A value that fits none of a union's shapes fails once per shape, plus the `anyOf`: said as what is
 * wrong with it. One that has a shape's type (a string, an array) gets only that shape's failures
 * (`must NOT have fewer than 1 characters`, or its items'); one of no shape's type, `must be string or
 * array`.
 */
function collapseAlternatives(issues: readonly ValidationIssue[]): ValidationIssue[] {
  const unions = new Set(issues.filter((issue) => issue.keyword === 'anyOf').map((issue) => issue.instancePath))
  if (unions.size === 0) return [...issues]
  const result: ValidationIssue[] = []
  const said = new Set<string>()
  for (const issue of issues) {
    const at = issue.instancePath
    if (!unions.has(at)) {
      result.push(issue)
      continue
    }
    if (issue.keyword !== 'anyOf' && issue.keyword !== 'type') {
      result.push(issue)
      continue
    }
    // The type mismatches and the anyOf itself: kept only when no shape's type fitted.
    if (said.has(at)) continue
    said.add(at)
    // A shape fitted when the value failed inside it (deeper down, whatever the keyword) or failed a
    // check of its own beyond the type (a length, a pattern).
    const fitted = issues.some(
      (other) =>
        other.instancePath.startsWith(`${at}/`) ||
        (other.instancePath === at && other.keyword !== 'anyOf' && other.keyword !== 'type'),
    )
    if (fitted) continue
    const types = issues
      .filter((other) => other.instancePath === at && other.keyword === 'type')
      .flatMap((other) => String(other.params.type).split(','))
    result.push({
      instancePath: at,
      keyword: 'type',
      message:
        types.length > 0 ? `must be ${[...new Set(types)].join(' or ')}` : 'must match one of its allowed shapes',
      params: {},
    })
  }
  return result
}

function describeIssue(issue: ValidationIssue, context: string): ProblemField {
  const base = [context, ...issue.instancePath.split('/').filter(Boolean)]
  if (issue.keyword === 'additionalProperties') {
    return { path: [...base, String(issue.params.additionalProperty)].join('.'), message: 'unknown field' }
  }
  if (issue.keyword === 'required') {
    return { path: [...base, String(issue.params.missingProperty)].join('.'), message: 'is required' }
  }
  if (issue.keyword === 'pattern' && issue.params.pattern === '\\S')
    return { path: base.join('.'), message: 'must not be blank' }
  if (issue.keyword === 'enum' && Array.isArray(issue.params.allowedValues)) {
    return { path: base.join('.'), message: `must be one of ${issue.params.allowedValues.join(', ')}` }
  }
  return { path: base.join('.'), message: issue.message ?? 'is invalid' }
}
