/**
 * When each problem code is answered: the "when" column of docs/reference/errors.md (the code,
 * status and title come from the catalogue in src/server/problem.ts). Every code needs a line here;
 * the compiler says which one is missing.
 */
import type { ProblemCode } from '../../src/server/index.js'

export const errorNotes = {
  validation_failed: 'body/query/params fail the schema (each bad field in `errors`)',
  invalid_json: 'the body is not JSON',
  invalid_cursor: 'a `cursor` this server did not issue',
  invalid_last_event_id:
    '`Last-Event-ID` / `?after=` is not a non-negative integer, or is past the newest event this server has given (an id from another database)',
  bad_request: 'other malformed requests',
  invalid_slash_command: 'slash text that does not parse (e.g. unbalanced quotes)',
  request_timeout:
    'the request (headers and body) did not arrive within `PLINTH_REQUEST_TIMEOUT`; the connection is closed',
  uri_too_long: 'a path segment longer than 100 characters (the URL is not echoed)',
  headers_too_large: "request headers over Node's limit",
  expectation_failed:
    'an `Expect` header other than `100-continue`; the connection is closed. (`CONNECT` is answered `method_not_allowed`.)',
  unauthorized: 'missing, unknown or revoked token; disabled user',
  forbidden: 'the caller sees the resource but may not do this (a member deleting a shared project; a rejected call)',
  denied: 'the risk gate denied a call that would need a human (`approvalPolicy: "dontAsk"`)',
  unknown_command: 'no such command',
  not_found: 'no such resource — or one the caller may not see',
  method_not_allowed: 'a method the route does not answer (e.g. `PUT /api/projects`)',
  not_acceptable:
    'not sent by the REST routes: they answer JSON (or SSE, for the event streams) whatever `Accept` says, and `Accept: text/event-stream` only chooses the stream on `POST …/runs`; kept for what a framework layer refuses',
  name_taken: 'a user name that exists',
  knowledge_not_ingested:
    '`POST /api/knowledge/:id/publish` on an item whose ingestion failed (its `ingestError` says why): upload it again',
  idempotency_key_in_progress: 'a concurrent request with the same key has not finished',
  dispatch_in_progress:
    'a concurrent dispatch with the same key has not finished; or a decision answered again while its approved command still runs, past the command’s timeout',
  decision_conflict: 'the decision was already answered differently',
  decision_expired: 'the decision expired (or was superseded) before this answer',
  scope_not_allowed:
    '`approve_session` on a command that asks every time (an execution under `direct`, a `confirm` command), or on a call outside a conversation: no allowance could ever apply to it; approve it once',
  run_active: 'a run is queued, running or waiting in the conversation (`activeRunId`, `activeStatus`, `awaiting`)',
  run_not_waiting: 'tool outputs for a call the run does not await',
  run_not_resumable: 'resume of a run that did not fail upstream',
  sandbox_unavailable:
    '`PATCH /api/admin/settings {"execBackend":"sandbox"}` when the sandbox probe fails (the reason is in `detail` and `probe`); an execution where the sandbox cannot work (exec tools off)',
  invalid_webhook_url: 'a webhook URL that is not an http(s) URL (or carries credentials)',
  webhook_url_not_allowed:
    'a webhook URL Plinth may not reach: http, loopback, private, link-local, metadata (see [Webhooks](../guides/frontends.md#webhooks))',
  too_many_webhooks: "a project's 51st webhook",
  webhook_disabled: 'a redelivery while the webhook is disabled',
  unknown_model: 'a `model` that is not configured',
  client_tool_conflict: "a run's client tool has the name of a command tool the model is offered",
  invalid_ui_message:
    'UI message stream: an unknown role or part type, or a last message Plinth cannot act on ([docs/ui-stream.md](../ui-stream.md#requests))',
  unsupported_ui_part: 'UI message stream: a file part (text only for now)',
  chat_id_mismatch: 'UI message stream: a chat id that is not the conversation',
  unknown_approval: 'UI message stream: an approval the run does not wait for',
  thread_mismatch:
    'AG-UI input: a `threadId` that is not the conversation ([docs/ag-ui.md](../ag-ui.md#errors-before-the-stream))',
  no_input: 'AG-UI input: neither a user message last nor answers to the waiting run',
  unsupported_content: 'AG-UI input: a non-text part',
  invalid_tool: 'AG-UI input: a frontend tool Plinth cannot offer',
  unknown_interrupt:
    'AG-UI input: answers that do not match what the run waits for (an interrupt it does not wait for)',
  unknown_tool_call:
    'AG-UI input: answers that do not match what the run waits for (a tool result for a call it did not make)',
  incomplete_resume: 'AG-UI input: answers that do not match what the run waits for (not all of them)',
  payload_too_large: 'body over the limit',
  unsupported_media_type: 'a body that is not `application/json`',
  idempotency_key_reused: 'same `Idempotency-Key`, different request',
  entrance_not_allowed:
    '`entrance: "agent"` over HTTP (`"mcp"` is not accepted there either: 400), or an entrance the command does not accept',
  command_error: 'the command refused on purpose (`CommandError`); its own code is in `commandCode`',
  command_failed: "the command's handler crashed (details are logged, not returned)",
  command_timeout: 'the handler did not finish within its `timeoutMs` (it is aborted)',
  result_too_large:
    "the command returned more than `PLINTH_RESULT_MAX_BYTES` of JSON (for a model's call, the tool result says so)",
  command_interrupted:
    'the server running the command stopped (crash) before it finished — or after a person approved it, before it started (then it did not run); the dispatch ended `interrupted` (a replay of its `Idempotency-Key` answers this), and a run waiting for it continues with the call answered `interrupted`',
  storage_full:
    "the server's disk (or the database's) is full: nothing of the request was kept; an operator must free space, and requests work again once there is room",
  quota_exceeded:
    "a work-directory upload, `write_file` or execution past the conversation's or the user's disk quota; knowledge past the user's volume",
  invalid_image:
    "an image in a run's `input` that cannot be used: not PNG, JPEG, WebP or GIF by its bytes, declared as another type than it is, over 5 MiB or 8,192 pixels a side (40 megapixels in all), more than 8 in one message, or a `url` that is not a base64 data URL",
  invalid_file:
    "a document in a run's `input` that cannot be used: neither or both of `fileId` and `knowledgeId`, a file that is missing, over 10 MiB, not .pdf/.docx/.html/.md/.txt, named .pdf but not a PDF by its bytes, or that the parser cannot read; a knowledge item you cannot see or not ingested yet; more than 4 in one message",
  model_lacks_capability:
    'a run\'s `input` has images but its model (and its fallbacks) does not declare `capabilities: ["vision"]`',
  nothing_to_compact:
    '`POST /api/conversations/:id/compact` on a conversation with no turn before its last (or none after its last compaction)',
  compaction_failed:
    '`POST /api/conversations/:id/compact` whose summary call failed upstream (nothing changed); a run whose automatic compaction fails goes on and reports `compaction.failed` instead',
  memory_too_large:
    'a memory whose `text` is over 4,000 characters, whose `value` is over 16 KiB as JSON, or whose namespace or key is over 200 characters',
  too_many_memories: "a new memory in a scope (the user's own, or a project's) that already holds 10,000",
  too_many_schedules: 'a new schedule in a project that already holds 1,000 (delete some first)',
  output_schema_invalid:
    'a run request\'s `output.schema` that is not a JSON Schema Ajv can compile, refers to itself without end (`{"$ref": "#"}`), or is over 64 KiB; the message says what is wrong',
  too_many_runs:
    'a run quota is full: the caller already has `maxActiveRunsPerUser` runs queued or running, the project its most, or the runs started in the last minute reached a per-minute quota; `quota` names it (`Retry-After`)',
  budget_exceeded:
    'a new run (or a resume) while the project or the user has spent its daily or monthly budget; `budget` names it, `resetAt` says when it resets (and `Retry-After` in how many seconds)',
  too_many_uploads: 'more uploads in flight than `uploads.perUser` / `uploads.total` (`Retry-After`)',
  too_many_executions:
    'as many executions running as `exec.maxConcurrent` allows on the instance, or `exec.maxConcurrentPerUser` for the user (a model reads it as the tool’s error)',
  result_not_stored: "a command's outcome could not be stored; the dispatch ended `failed` with the database's reason",
  rate_limited: 'over a rate limit (per address, per failed authentication, per token) or the connection cap',
  too_many_streams:
    'the token already holds `PLINTH_SSE_MAX_PER_TOKEN` streams, or the server `PLINTH_SSE_MAX_STREAMS` (`limit` is the number that was reached, `detail` says which); an SSE run start and a `?wait` hold a slot too',
  internal: 'a bug; logged with the request id, nothing internal in the answer',
  not_implemented: 'no route answers it today (kept in the catalogue for features not built yet)',
  service_unavailable:
    '`/readyz` when the database does not answer; a request while the database restarts, fails over or is out of reach (with `Retry-After`); requests during shutdown',
  shutting_down:
    'a new run (or a resume) while the server is stopping; retry — another instance, or this one restarted, takes it',
  overloaded:
    'a new run while this instance is past its capacity — its event loop or its database late, or its cap on runs in flight reached (the operator’s, or the one it sets itself under pressure); the detail says which; nothing was started — retry after `Retry-After` (another instance may take it; see [Scaling](../guides/scaling.md#overload))',
} as const satisfies Record<ProblemCode, string>
