import type { components } from 'plinth/openapi'

/** A problem+json answer (RFC 9457) as the server sends it. */
export type Problem = components['schemas']['Problem']

/**
 * What every failed call throws: the server's problem+json, with its stable `code` (listed in
 * docs/reference/errors.md). A server that cannot be reached is `status: 0`, `code: 'unreachable'`; a stream the server
 * closed because access went is `code: 'access_revoked'`.
 */
export class PlinthError extends Error {
  /** The HTTP status; 0 when no answer came. */
  readonly status: number
  /** The stable code, e.g. `not_found`, `run_active`, `validation_failed`. */
  readonly code: string
  /** The whole problem document (extra members such as `activeRunId` included). */
  readonly problem: Problem | null

  constructor(
    status: number,
    code: string,
    message: string,
    problem: Problem | null = null,
    options?: { cause?: unknown },
  ) {
    super(message, options)
    this.name = 'PlinthError'
    this.status = status
    this.code = code
    this.problem = problem
  }
}

/** The error for a non-2xx answer whose body has been read (JSON or not). */
export function problemError(status: number, body: unknown): PlinthError {
  const problem = body !== null && typeof body === 'object' && !Array.isArray(body) ? (body as Problem) : null
  const code = typeof problem?.code === 'string' ? problem.code : `http_${status}`
  const detail =
    typeof problem?.detail === 'string' && problem.detail
      ? problem.detail
      : typeof problem?.title === 'string'
        ? problem.title
        : typeof body === 'string' && body
          ? body.slice(0, 200)
          : `HTTP ${status}`
  return new PlinthError(status, code, detail, problem)
}

/** Reads a failed response's body into a PlinthError. */
export async function errorFrom(response: Response): Promise<PlinthError> {
  const text = await response.text().catch(() => '')
  let body: unknown = text
  try {
    body = text ? JSON.parse(text) : null
  } catch {
    // Not JSON (a proxy's HTML page): the text is the detail.
  }
  return problemError(response.status, body)
}

export function unreachable(url: string, cause: unknown): PlinthError {
  const reason =
    (cause as { cause?: { code?: string } })?.cause?.code ?? (cause instanceof Error ? cause.message : String(cause))
  return new PlinthError(0, 'unreachable', `cannot reach ${url}: ${reason}`, null, { cause })
}
