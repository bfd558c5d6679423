/**
 * The catalogue of client-facing errors. Each is answered as `application/problem+json`
 * (RFC 9457) with a stable snake_case `code`; the key of each entry equals its code.
 */
export const problemCatalogue = {
  unauthorized: { status: 401, title: 'Unauthorized' },
  forbidden: { status: 403, title: 'Forbidden' },
  denied: { status: 403, title: 'Denied by the risk gate' },
  unknown_command: { status: 404, title: 'Unknown command' },
  invalid_slash_command: { status: 400, title: 'Invalid slash command' },
  entrance_not_allowed: { status: 422, title: 'Entrance not allowed' },
  command_error: { status: 422, title: 'The command reported an error' },
  dispatch_in_progress: { status: 409, title: 'A dispatch with this key is in progress' },
  decision_conflict: { status: 409, title: 'Decision already answered differently' },
  decision_expired: { status: 409, title: 'Decision expired' },
  scope_not_allowed: { status: 409, title: 'That scope cannot apply to this decision' },
  run_active: { status: 409, title: 'A run is active in this conversation' },
  run_not_waiting: { status: 409, title: 'The run is not waiting for that' },
  invalid_ui_message: { status: 400, title: 'Not a UI message request Plinth can act on' },
  unsupported_ui_part: { status: 400, title: 'A UI message part Plinth does not take yet' },
  chat_id_mismatch: { status: 400, title: 'The chat id is not this conversation' },
  unknown_approval: { status: 400, title: 'No such approval waits in this run' },
  run_not_resumable: { status: 409, title: 'The run cannot be resumed' },
  sandbox_unavailable: { status: 409, title: 'The sandbox is unavailable' },
  unknown_model: { status: 422, title: 'Unknown model' },
  invalid_webhook_url: { status: 400, title: 'Not a webhook URL' },
  webhook_url_not_allowed: { status: 400, title: 'Webhook URL not allowed' },
  too_many_webhooks: { status: 409, title: 'Too many webhooks in this project' },
  webhook_disabled: { status: 409, title: 'The webhook is disabled' },
  client_tool_conflict: { status: 422, title: 'A client tool has the name of a command tool' },
  // AG-UI input (POST /api/conversations/:id/ag-ui).
  thread_mismatch: { status: 400, title: 'threadId is not the conversation of the path' },
  no_input: { status: 400, title: 'The input neither starts a run nor answers one' },
  unsupported_content: { status: 400, title: 'Content Plinth cannot take' },
  invalid_tool: { status: 400, title: 'A tool Plinth cannot offer' },
  unknown_interrupt: { status: 400, title: 'The run does not wait for that interrupt' },
  unknown_tool_call: { status: 400, title: 'A tool result for a call the run did not make' },
  incomplete_resume: { status: 400, title: 'Not everything the run waits for was answered' },
  not_implemented: { status: 501, title: 'Not implemented' },
  shutting_down: { status: 503, title: 'The server is shutting down' },
  command_failed: { status: 502, title: 'The command failed' },
  command_interrupted: { status: 502, title: 'The server stopped while the command ran' },
  result_too_large: { status: 502, title: 'The command returned a result over the size limit' },
  command_timeout: { status: 504, title: 'The command timed out' },
  not_found: { status: 404, title: 'Not found' },
  bad_request: { status: 400, title: 'Bad request' },
  validation_failed: { status: 400, title: 'Validation failed' },
  output_schema_invalid: { status: 400, title: 'The output schema is not a usable JSON Schema' },
  invalid_image: { status: 400, title: 'The image cannot be used' },
  invalid_file: { status: 400, title: 'The document cannot be used' },
  model_lacks_capability: { status: 400, title: 'The model cannot take this input' },
  nothing_to_compact: { status: 409, title: 'Nothing to compact' },
  knowledge_not_ingested: { status: 409, title: 'The knowledge item did not ingest' },
  compaction_failed: { status: 502, title: 'The summary call failed' },
  memory_too_large: { status: 413, title: 'The memory is over the size limit' },
  too_many_memories: { status: 409, title: 'The scope holds as many memories as it may' },
  too_many_schedules: { status: 409, title: 'The project holds as many schedules as it may' },
  invalid_json: { status: 400, title: 'Malformed JSON body' },
  invalid_cursor: { status: 400, title: 'Invalid cursor' },
  invalid_last_event_id: { status: 400, title: 'Invalid Last-Event-ID' },
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  not_acceptable: { status: 406, title: 'Not acceptable' },
  idempotency_key_in_progress: { status: 409, title: 'A request with this Idempotency-Key is in progress' },
  name_taken: { status: 409, title: 'Name already taken' },
  request_timeout: { status: 408, title: 'Request timeout' },
  payload_too_large: { status: 413, title: 'Payload too large' },
  quota_exceeded: { status: 507, title: 'Storage quota exceeded' },
  storage_full: { status: 507, title: 'The server is out of disk space' },
  too_many_uploads: { status: 429, title: 'Too many uploads at once' },
  too_many_executions: { status: 429, title: 'Too many executions at once' },
  too_many_runs: { status: 429, title: 'Too many runs queued or running' },
  budget_exceeded: { status: 429, title: 'The budget for this period is spent' },
  result_not_stored: { status: 502, title: 'The command’s result could not be stored' },
  uri_too_long: { status: 414, title: 'URI too long' },
  unsupported_media_type: { status: 415, title: 'Unsupported media type' },
  idempotency_key_reused: { status: 422, title: 'Idempotency-Key reused with a different request' },
  expectation_failed: { status: 417, title: 'Expectation failed' },
  headers_too_large: { status: 431, title: 'Request header fields too large' },
  rate_limited: { status: 429, title: 'Too many requests' },
  too_many_streams: { status: 429, title: 'Too many open event streams' },
  internal: { status: 500, title: 'Internal server error' },
  service_unavailable: { status: 503, title: 'Service unavailable' },
  overloaded: { status: 503, title: 'The server is past its capacity; no run was started' },
} as const satisfies Record<string, { status: number; title: string }>

export type ProblemCode = keyof typeof problemCatalogue

export interface ProblemField {
  path: string
  message: string
}

/** The body of every error answer. */
export interface ProblemBody {
  type: string
  title: string
  status: number
  code: string
  detail?: string
  instance?: string
  errors?: ProblemField[]
  [extension: string]: unknown
}

/** An expected client-facing failure; the error handler turns it into problem+json. */
export class HttpProblem extends Error {
  readonly code: ProblemCode
  readonly status: number
  readonly extensions: Record<string, unknown>

  constructor(code: ProblemCode, detail?: string, extensions: Record<string, unknown> = {}) {
    super(detail ?? problemCatalogue[code].title)
    this.name = 'HttpProblem'
    this.code = code
    this.status = problemCatalogue[code].status
    this.extensions = extensions
  }
}

export function problemBody(
  code: ProblemCode,
  detail: string | undefined,
  extensions: Record<string, unknown> = {},
): ProblemBody {
  const entry = problemCatalogue[code]
  return {
    type: `urn:plinth:problem:${code}`,
    title: entry.title,
    status: entry.status,
    code,
    ...(detail !== undefined && { detail }),
    ...extensions,
  }
}

/** Shorthand for the most common answer: whatever it is, the caller cannot see it. */
export function notFound(what = 'resource'): HttpProblem {
  return new HttpProblem('not_found', `${what} not found`)
}
