/** Why a run could not be created; the HTTP layer maps the code. */
export class RunRequestError extends Error {
  readonly code: 'unknown_model' | 'validation_failed'

  constructor(code: 'unknown_model' | 'validation_failed', message: string) {
    super(message)
    this.name = 'RunRequestError'
    this.code = code
  }
}
