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
  | 'migration_failed'
  | 'migrations_pending'
  | 'vector_unavailable'

/** Whether a database error is a unique-constraint violation (e.g. a second active run in a conversation). */
export function isUniqueViolation(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === '23505'
}
