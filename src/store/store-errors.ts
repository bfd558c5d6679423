/**
 * Errors the store raises for broken infrastructure or configuration (not for expected outcomes,
 * which are returned as values). `code` is stable; the message is for operators.
 */
export class StoreError extends Error {
  readonly code: StoreErrorCode

  constructor(code: StoreErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'StoreError'
    this.code = code
  }
}

export type StoreErrorCode =
  | 'database_unreachable'
  | 'data_dir_unwritable'
  | 'data_dir_locked'
  | 'migration_checksum_mismatch'
  | 'migration_unknown'
  | 'migration_failed'
  | 'migrations_pending'
  | 'vector_unavailable'

/**
 * An idempotency key another transaction committed first: the caller rolls its transaction back and
 * replays the winner's outcome (an HTTP answer or a dispatch).
 */
export class KeyTaken extends Error {
  constructor() {
    super('the idempotency key was taken by a concurrent request')
    this.name = 'KeyTaken'
  }
}

/** The run's lease has passed to someone else (or the run ended elsewhere): its driver stops without writing. */
export class LeaseLost extends Error {
  constructor() {
    super('the run lease has passed to another driver')
    this.name = 'LeaseLost'
  }
}

/**
 * SQLSTATEs of a database that went away: connection exceptions (08…), the server shutting down or
 * restarting (57P01–57P03), and a standby that cannot take writes after a failover (25006).
 */
const unavailableStates = /^(08\d{3}|57P0[1-3]|25006)$/
/** Messages and codes of a connection lost or refused below SQL (node-postgres and the socket). */
const lostConnection =
  /Connection terminated|connection error and is not queryable|Client was closed and is not queryable|timeout exceeded when trying to connect|Connection terminated due to connection timeout/
const socketCodes = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH'])

/**
 * Whether an error means the database could not be reached (restarting, failing over, a network
 * outage) rather than that the statement was wrong: asking again later may succeed.
 */
export function isDatabaseUnavailable(error: unknown, depth = 0): boolean {
  if (typeof error !== 'object' || error === null) return false
  const { code, message, cause } = error as { code?: unknown; message?: unknown; cause?: unknown }
  if (typeof code === 'string' && unavailableStates.test(code)) return true
  // A socket error only at the top: a cause chain may be another service's (a fetch to an upstream).
  if (typeof code === 'string' && depth === 0 && socketCodes.has(code)) return true
  if (typeof message === 'string' && lostConnection.test(message)) return true
  return depth < 3 && isDatabaseUnavailable(cause, depth + 1)
}

/** Whether a database error is a unique-constraint violation (e.g. a second active run in a conversation). */
export function isUniqueViolation(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === '23505'
}

/**
 * Whether a database error is the one-active-run index refusing a second running run in a
 * conversation (where the driver does not name the constraint, any unique violation).
 */
export function isOneActiveRunViolation(error: unknown): boolean {
  const constraint = (error as { constraint?: unknown } | null)?.constraint
  return isUniqueViolation(error) && (constraint === undefined || constraint === 'runs_one_active')
}

/** Whether a database error is a new run's quota re-count refusing it (`runQuotaCheck`): counted again, it is full. */
export function isRunQuotaFull(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === 'PL429'
}

/** What a caller's request may be refused for by a module service; the HTTP layer maps the code. */
export type RequestErrorCode =
  | 'not_found'
  | 'forbidden'
  | 'name_taken'
  | 'validation_failed'
  | 'unknown_model'
  | 'shutting_down'
  | 'client_tool_conflict'
  | 'quota_exceeded'
  | 'too_many_runs'
  | 'budget_exceeded'
  | 'run_active'
  | 'run_not_resumable'
  | 'run_not_waiting'
  | 'output_schema_invalid'
  | 'model_lacks_capability'
  | 'memory_too_large'
  | 'nothing_to_compact'
  | 'compaction_failed'
  | 'too_many_memories'
  | 'too_many_schedules'
  | 'invalid_webhook_url'
  | 'webhook_url_not_allowed'
  | 'too_many_webhooks'
  | 'webhook_disabled'
  | 'knowledge_not_ingested'
  | 'service_unavailable'

/**
 * A request a module service refuses (an expected outcome for the caller, not a fault). `errors` names
 * the offending fields, as `path: message`.
 */
export class RequestError extends Error {
  readonly code: RequestErrorCode
  readonly errors: Array<{ path: string; message: string }> | undefined
  /** More members of the problem answer (e.g. the budget that was hit and when it resets). */
  readonly extensions: Record<string, unknown> | undefined
  /** Seconds after which asking again may succeed (a `Retry-After` header). */
  readonly retryAfter: number | undefined

  constructor(
    code: RequestErrorCode,
    message: string,
    errors?: Array<{ path: string; message: string }>,
    more?: { extensions?: Record<string, unknown>; retryAfter?: number },
  ) {
    super(message)
    this.name = 'RequestError'
    this.code = code
    this.errors = errors
    this.extensions = more?.extensions
    this.retryAfter = more?.retryAfter
  }
}

/** Whatever it is, the caller cannot see it (same answer as for something that does not exist). */
export function notFoundError(what: string): RequestError {
  return new RequestError('not_found', `${what} not found`)
}
