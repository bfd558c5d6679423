/** Why a run could not be created; the HTTP layer maps the code. */
export class RunRequestError extends Error {
  readonly code: 'unknown_model' | 'validation_failed' | 'shutting_down' | 'client_tool_conflict'

  constructor(code: 'unknown_model' | 'validation_failed' | 'shutting_down' | 'client_tool_conflict', message: string) {
    super(message)
    this.name = 'RunRequestError'
    this.code = code
  }
}
