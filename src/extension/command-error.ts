/**
 * A failure a handler reports on purpose: the caller (a person or the model) reads `code` and
 * `message`. Any other thrown error is reported as `command_failed` without its internals.
 *
 * @example throw new CommandError('forbidden', 'only the project owner may add members')
 */
export class CommandError extends Error {
  readonly code: string

  constructor(code: string, message: string) {
    super(message)
    this.name = 'CommandError'
    this.code = code
  }
}
