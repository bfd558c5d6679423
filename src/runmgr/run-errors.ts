import { RequestError } from '../store/index.js'

/** Why a run could not be created, resumed or answered; the HTTP layer maps the code. */
export class RunRequestError extends RequestError {
  constructor(
    code:
      | 'unknown_model'
      | 'validation_failed'
      | 'shutting_down'
      | 'client_tool_conflict'
      | 'too_many_runs'
      | 'budget_exceeded'
      | 'run_active'
      | 'run_not_resumable'
      | 'run_not_waiting'
      | 'output_schema_invalid'
      | 'model_lacks_capability'
      | 'nothing_to_compact'
      | 'compaction_failed',
    message: string,
    more?: {
      extensions?: Record<string, unknown>
      retryAfter?: number
      /** The offending fields (`validation_failed`), as `path: message`. */
      errors?: Array<{ path: string; message: string }>
    },
  ) {
    super(code, message, more?.errors, more)
    this.name = 'RunRequestError'
  }
}
