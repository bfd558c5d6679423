/**
 * What each setting means: the "meaning" column of docs/reference/configuration.md (the env
 * variables, type and default come from src/app/config.ts). `default` is written where the value is
 * computed or filled in somewhere the generator cannot read. scripts/generate-docs.ts refuses a
 * setting without a note here, and a note for a setting that does not exist.
 */
export interface ConfigNote {
  meaning: string
  /** Markdown for the default column, when the configured default does not say it. */
  default?: string
}

export const configNotes: Record<string, ConfigNote> = {
  port: { meaning: 'listen port' },
  host: { meaning: 'listen address' },
  databaseUrl: { meaning: '`postgres://…`: use a Postgres server (needs pgvector ≥ 0.5); unset: embedded PGlite' },
  dataDir: { meaning: 'PGlite files (`<dir>/pg`) and the process lock' },
  adminToken: { meaning: 'enables `/api/admin` (≥ 16 chars)' },
  plugins: {
    meaning:
      'plugins to load in order, comma-separated: a bundled one by name (`rdm`), a path (`./my-plugin.js`, `.ts`, a folder; in the file: relative to the file), or an installed package',
  },
  mcpServers: {
    meaning:
      "MCP servers whose tools become commands `mcp.<server>.<tool>`; the variable is the same array as JSON and replaces the file's ([docs/mcp.md](../mcp.md#configuration)). `mcpServers[].sandbox` (default `false`), stdio: run the server in the exec sandbox, one process per conversation with its work directory as cwd; never started outside the sandbox (with `network`, `mounts`, `idleTimeoutMs`, `maxProcesses`: [docs/mcp.md](../mcp.md#sandboxed-stdio-servers))",
  },
  secretKey: {
    meaning: 'seals per-user MCP OAuth tokens at rest (≥ 16 chars; set it in the environment, not the file)',
  },
  mcpAuthorizationServers: {
    meaning:
      "authorization server URLs `/mcp`'s protected-resource metadata names (`authorization_servers`), comma-separated, for OAuth-aware MCP clients",
  },
  strictPlugins: { meaning: 'a plugin that cannot load stops the server (also `plinth serve --strict-plugins`)' },
  models: {
    meaning:
      'model configuration (see [Models](../guides/agent-runs.md#models)); each `id` once, `baseUrl` an `http(s)://` URL; `models[].pricing` `{inputPerMillion, outputPerMillion, cachedInputPerMillion}` prices its calls (see [Usage and cost](../guides/operating.md#usage-and-cost)); `models[].fallbacks` `[modelId…]` and `models[].retries` (0–10) move a failing call to other models (see [Model fallback](../guides/agent-runs.md#model-fallback))',
    default: 'demo model',
  },
  defaultModel: {
    meaning:
      'the configured model (its `id`) a run uses when neither the run nor its project names one (see [Models](../guides/agent-runs.md#models))',
  },
  currency: {
    meaning:
      'the currency (ISO 4217 code) of `models[].pricing` and of every cost the API reports (see [Usage and cost](../guides/operating.md#usage-and-cost))',
  },
  'schedules.enabled': {
    meaning:
      'whether this instance fires due schedules (every instance may; the database picks one per occurrence — see [Scheduled runs](../guides/schedules.md))',
  },
  'schedules.tickMs': {
    meaning: 'how often this instance looks for due schedules: about the most an occurrence fires late',
  },
  'runQuota.maxActiveRunsPerProject': {
    meaning:
      "runs one project may have queued or running at once, everyone's together (the next is 429 `too_many_runs`; an operator may set a project's own with `PATCH /api/admin/projects/:id {quota}`; see [Run quotas](../guides/operating.md#run-quotas))",
  },
  'runQuota.runsPerMinutePerUser': {
    meaning: 'runs one user may start in any 60 seconds (the next is 429 `too_many_runs` with `Retry-After`)',
  },
  'runQuota.runsPerMinutePerProject': {
    meaning: "runs that may start in one project in any 60 seconds, everyone's together",
  },
  'runQuota.overLimit': {
    meaning:
      'what a new run over one of these quotas gets: `refuse` (429 `too_many_runs` with `Retry-After`) or `queue` (201 `status: queued` with `queue: {reason: "quota", position}`, started oldest first as room frees, on whichever instance; see [Run quotas](../guides/operating.md#run-quotas))',
  },
  'compaction.enabled': {
    meaning:
      "compact long conversations automatically at a run's start (forcing it with `POST /api/conversations/:id/compact` works either way; see [Context compaction](../guides/agent-runs.md#context-compaction))",
  },
  'compaction.threshold': {
    meaning:
      "the share of the model's context window the uncompacted transcript may take before a run's start compacts it (tokens estimated at 4 characters)",
  },
  'compaction.keepRecent': {
    meaning:
      'the share of the context window the newest messages, kept as they are, may take (the cut moves to the start of a user turn); must be less than `threshold`',
  },
  'compaction.model': { meaning: "the model that writes summaries (unset: the run's own model)" },
  'compaction.prompt': { meaning: 'the summariser’s instructions (unset: the built-in prompt)' },
  'retention.runEventsDays': {
    meaning:
      "days after a run ends that its events (the streams' replay) are kept; then a sweeper deletes them in batches — the run, its messages, tool calls, usage and audit entries stay (unset: kept for ever; see [Retention](../guides/operating.md#retention))",
  },
  'retention.idleConversationDays': {
    meaning:
      'days a conversation may stay idle (no message, run or change) before its messages, tool calls, events and files are purged and it becomes deleted — its runs and usage stay (unset: kept for ever; a project may set a shorter period)',
  },
  'retention.dispatchDays': {
    meaning:
      'days a settled dispatch and its decisions are kept after their last change — their audit entries stay (unset: kept for ever; a project may set a shorter period)',
  },
  'retention.knowledgeDraftDays': {
    meaning:
      'days an unpublished knowledge draft nobody changes, or a deleted knowledge item, is kept (unset: kept for ever; a project may set a shorter period)',
  },
  'retention.auditDays': {
    meaning:
      'days the audit log keeps an entry; the oldest go as a prefix of the chain under a checkpoint signed with `secretKey` (required), from which `plinth audit verify` checks (unset: kept for ever)',
  },
  'retention.sweepMs': {
    default: '10 min',
    meaning: 'how often each instance sweeps (one at a time, under a lock in the database)',
  },
  'runQuota.maxQueuedRunsPerUser': {
    meaning: 'queue mode: runs one user may have waiting for a quota (the next is 429 `too_many_runs`)',
  },
  'runBudget.maxModelCalls': {
    meaning:
      'the most model calls a run may make unless its request sets `budget.maxModelCalls` (a run that reaches it fails `budget_exceeded`; see [Budgets](../guides/operating.md#budgets))',
  },
  'runBudget.maxTokens': {
    meaning: 'the most tokens (input plus output) a run may spend unless its request sets `budget.maxTokens`',
  },
  'runBudget.maxCost': {
    meaning:
      'the most a run may cost, in `currency`, unless its request sets `budget.maxCost` (runs on a model without a price are not held to it)',
  },
  'exec.backend': {
    meaning:
      '`auto` (the sandbox where its probe passes, otherwise exec tools off), `sandbox`, or `direct` — programs on the server itself, only by this explicit choice (see [Execution](../guides/sandbox.md)); switchable at run time',
  },
  'exec.disableExecTools': {
    meaning: 'no exec tools at all (no `exec`, `run_code` or CLI tools; the file tools stay)',
  },
  'exec.sandboxUser': { meaning: 'the unprivileged user sandboxed programs run as when the server runs as root' },
  'exec.workRoot': {
    meaning: 'where conversation work directories live (the sandbox user must be able to reach it)',
    default: '`<dataDir>/work`',
  },
  'exec.requireCgroups': { meaning: 'refuse the sandbox without cgroups' },
  'exec.allowMultiline': { meaning: 'shell lines with newlines' },
  'exec.timeoutMs': { meaning: 'wall-clock limit of one execution' },
  'exec.limits.memoryMb': { meaning: 'per-execution memory limit (cgroup)' },
  'exec.limits.pids': { meaning: 'per-execution process limit (cgroup pids)' },
  'exec.limits.cpuSeconds': { meaning: 'per-execution CPU time (RLIMIT_CPU)' },
  'exec.limits.fileSizeMb': { meaning: 'largest file an execution may write (RLIMIT_FSIZE)' },
  'exec.limits.outputBytes': {
    meaning:
      'captured output per stream; two of it plus 16 KiB must fit `resultMaxBytes` (checked at start, [docs/exec.md](../exec.md#bounds))',
    default: '`(resultMaxBytes − 16 KiB) / 2` = `516096`',
  },
  'exec.network': { meaning: 'network inside the sandbox' },
  'exec.tmpSizeMb': { meaning: "the sandbox's /tmp size" },
  'exec.runtimes': { meaning: 'runtime directories by name' },
  'exec.deniedSegments': { meaning: 'path segments the file tools refuse' },
  'exec.maxCodeBytes': { meaning: '`run_code` size' },
  'exec.maxUploadBytes': { meaning: 'files API upload limit (413 above)' },
  'exec.maxDownloadBytes': { meaning: 'files API download limit (413 above)' },
  'exec.directApprovers': {
    meaning: 'user names or ids who alone may approve an execution under `direct` (never the requester)',
  },
  'exec.quota.conversationBytes': { meaning: 'bytes one work directory may hold' },
  'exec.quota.userBytes': { meaning: "bytes all of one user's work directories may hold" },
  'exec.quota.conversationFiles': { meaning: 'entries one work directory may hold' },
  'exec.quota.projectBytes': { meaning: "bytes the work directories of all of one project's conversations may hold" },
  'exec.maxConcurrent': {
    meaning:
      'executions running at once on this instance (each may use `exec.limits.memoryMb`); past it 429 `too_many_executions`',
  },
  'exec.maxConcurrentPerUser': { meaning: 'executions one user may have running at once on this instance' },
  'exec.fileStore': {
    meaning:
      'where work directories’ files are kept: `postgres` (in the database, shared by every instance; each instance’s directory is a cache), `local` (each instance’s disk only), or `auto` — `postgres` on an external Postgres, `local` on the embedded database (see [Scaling](../guides/scaling.md#files))',
  },
  'exec.cliTools': { meaning: 'allowlisted CLIs (see [Execution](../guides/sandbox.md))' },
  logLevel: { meaning: 'pino level (`silent` … `trace`)' },
  bodyLimit: {
    meaning:
      'largest JSON request body, bytes; over it 413 `payload_too_large` — answered before `100 Continue` when the client sends `Expect: 100-continue` (curl does over 1 MiB), otherwise after reading and dropping the rest of the body (up to 64 MiB or 10 s, then the connection is cut) so that curl, fetch and browsers read the problem document instead of a broken pipe',
  },
  'rateLimit.max': { meaning: 'requests per token per window' },
  'rateLimit.windowMs': { meaning: 'rate-limit window' },
  'rateLimit.addressMax': { meaning: 'requests per client address per window, counted before authentication' },
  'rateLimit.authFailureMax': {
    meaning: 'failed authentications (401) per address per window; past it the address gets 429',
  },
  'rateLimit.authFailureWindowMs': { meaning: 'window of the failure budget' },
  requestTimeoutMs: { meaning: 'the whole request (headers and body) must arrive within this (408)' },
  connectionTimeoutMs: { meaning: 'an idle connection is closed (must exceed the heartbeat)' },
  maxConnectionsPerAddress: { meaning: 'open connections per client address (429 past it)' },
  maxConnections: { meaning: 'open connections in total' },
  'overload.maxEventLoopDelayMs': {
    meaning:
      'while the event loop runs this many milliseconds late, new runs (`POST /api/conversations/:id/runs`) are refused 503 `overloaded` with `Retry-After`, before any work; `0`: never (see [Scaling](../guides/scaling.md#overload))',
  },
  'overload.maxDatabaseWaitMs': {
    meaning:
      "while a trivial statement (sent once a second) waits this many milliseconds for the database — the embedded database's queue, a pooled connection, the server — new runs are refused as above; `0`: not measured",
  },
  'overload.maxAdmitMs': {
    meaning:
      'while accepting a new run takes this many milliseconds (the oldest run-creating request still being answered, or the last one answered within 2 s), further new runs are refused as above; `0`: not measured',
  },
  'overload.maxActiveRuns': {
    meaning:
      'while the instance has this many runs in flight (driven — in a model turn or a tool call, or waiting for a model slot; not those waiting for a person — or being accepted), new runs are refused as above; `0`: no cap',
  },
  'overload.adaptiveCapSeconds': {
    meaning:
      "under pressure — the event loop later than a quarter of `maxEventLoopDelayMs`, or the database than a quarter of `maxDatabaseWaitMs` — the instance caps runs in flight (driven, or being accepted) at this many seconds of the runs it completes, growing the cap back once on time (never above `maxActiveRuns`); `0`: only the operator's cap (see [Scaling](../guides/scaling.md#overload))",
  },
  'overload.retryAfterSeconds': { meaning: 'the `Retry-After` of an `overloaded` refusal' },
  'uploads.perUser': { meaning: 'uploads in flight per user (429 `too_many_uploads` past it)' },
  'uploads.total': { meaning: 'uploads in flight in all (429 `too_many_uploads` past it)' },
  trustProxy: {
    meaning:
      "reverse proxies whose `X-Forwarded-For` is believed (`true`, or addresses/CIDRs, comma-separated); without it the client address is the socket's",
  },
  metricsToken: {
    meaning: 'bearer token for `/metrics` (≥ 16 chars); without it `/metrics` answers only when `HOST` is loopback',
  },
  corsOrigins: { meaning: 'origins browsers may call from (`scheme://host[:port]`, comma-separated); empty: CORS off' },
  sseHeartbeatMs: { meaning: 'SSE heartbeat interval' },
  embeddings: {
    meaning:
      '`{"provider": "hash", "dimensions": 256}` or `{"provider": "openai", "model", "baseUrl", "apiKeyEnv", "dimensions"}` (see [Knowledge and search](../guides/knowledge-and-search.md))',
    default: 'hashing embedder',
  },
  'knowledge.maxFileBytes': {
    meaning:
      'largest knowledge file (a multipart upload or a registered work file; 413 above); a JSON `{title, text}` item is bounded by its 2,000,000 characters and `bodyLimit` instead',
  },
  'knowledge.maxBytesPerUser': {
    meaning: "knowledge one user may hold (their items' sizes); past it 507 `quota_exceeded`",
  },
  'knowledge.maxAttempts': {
    meaning: "times an item's ingestion may start without finishing before it is failed",
    default: '`3`',
  },
  'knowledge.minSimilarity': {
    meaning:
      "hybrid search's relevance floor: a hit that matched no word of the query needs at least this cosine similarity (-1 turns it off; see [Knowledge and search](../guides/knowledge-and-search.md))",
  },
  'knowledge.extract.heapMb': { meaning: "caps the parser process's JS heap", default: '`512`' },
  'knowledge.extract.rssMb': { meaning: "the parser process's memory; past it the document fails", default: '`1024`' },
  'knowledge.extract.timeoutMs': {
    meaning: 'how long parsing one document may take before it fails',
    default: '`120s`',
  },
  'knowledge.extract.limits.maxChars': { meaning: 'characters of text a document may yield' },
  'knowledge.extract.limits.maxPages': { meaning: 'pages of a PDF' },
  'knowledge.extract.limits.maxDecompressedBytes': { meaning: "bytes a DOCX's ZIP entries may inflate to, in all" },
  'knowledge.extract.limits.maxZipRatio': { meaning: 'how much larger than its compressed size one ZIP entry may be' },
  'knowledge.extract.limits.maxZipEntries': { meaning: 'entries of a ZIP archive (a DOCX)' },
  'knowledge.extract.limits.maxNesting': {
    meaning: 'elements nested in one another (HTML, and the HTML a DOCX becomes)',
  },
  'streams.maxPerToken': { meaning: 'open event streams per token' },
  'streams.maxTotal': { meaning: 'open event streams per server' },
  'streams.maxLifetimeMs': { meaning: 'a stream ends with `event: reconnect` after this long' },
  'streams.recheckIntervalMs': {
    meaning: 'streams that see a project through sharing re-ask the ProjectAuthz adapter this often',
  },
  'streams.drainTimeoutMs': { meaning: 'a client that has not taken a write this long is dropped' },
  fullModeTtlMs: { meaning: 'how long `permissionMode: "full"` lasts before reverting to `manual`' },
  actionTtlMs: { meaning: 'how long a pending decision waits before it expires' },
  allowanceTtlMs: { meaning: 'how long an `approve_session` allowance lasts' },
  toolOutputLimit: { meaning: 'bytes of a tool result the model reads' },
  llmIdleTimeoutMs: { meaning: 'a model stream silent this long is aborted' },
  llmCallTimeoutMs: {
    meaning:
      'a model call taking longer than this in all is aborted (`timeout`): a stream that trickles a byte now and then holds no model slot for ever',
  },
  llmMaxAnswerBytes: {
    meaning:
      'bytes of one model answer as received, the wire format’s framing included (an OpenAI-style stream is about 50 bytes a token); past it the call stops and the run fails `output_too_large`. An upstream’s error body is read up to 64 KiB',
  },
  llmMaxOutputChars: {
    meaning:
      'characters of text and tool-call arguments in one model answer; past it the run fails `output_too_large` and nothing of the answer runs ([agent runs](../guides/agent-runs.md#limits-on-an-answer))',
  },
  llmMaxToolCalls: {
    meaning:
      'tool calls in one model answer; one more and the run fails `output_too_large`, none of them stored or run',
  },
  llmConcurrency: {
    meaning:
      'model calls in flight across all runs on this instance (one per conversation), shared fairly between users: a freed slot goes to the waiting user holding the fewest',
  },
  llmConcurrencyPerUser: {
    meaning: 'model calls one user may hold at once, so other users always find room',
    default: 'half of `llmConcurrency`',
  },
  maxActiveRunsPerUser: {
    meaning:
      'runs one user may have queued or running at once, on all instances together (counted in the database); the next is 429 `too_many_runs`',
  },
  runLeaseMs: {
    meaning:
      "a running run's lease, and a running dispatch's executor lease: after a crash, another instance resumes the run (and ends the dead process's dispatches `interrupted`) once it has passed",
  },
  runMaxResumes: {
    meaning:
      'automatic resumes of one run after its driver died (its lease ran out) before it ends `failed` (`interrupted`); resumes after a graceful stop are not counted',
  },
  shutdownGraceMs: { meaning: 'how long a graceful stop lets tool calls in flight finish before aborting them' },
  dataDirLockWaitMs: {
    meaning:
      'embedded database: how long `plinth serve` waits (logging that it waits) for another process still holding the data directory — a restart right after a stop — before refusing; `0` refuses at once. Other CLI commands never wait',
  },
  highRiskKeywords: {
    meaning:
      'comma-separated operator keywords (plain, case-sensitive substrings): a command string containing one is high risk (on top of the built-in rules)',
  },
  resultMaxBytes: {
    meaning:
      "largest result a command may return (JSON bytes, at least 32 KiB); over it the dispatch fails `result_too_large` and nothing of the result is stored (an execution's result is cut to fit instead)",
  },
  pgliteSharedBuffers: {
    meaning:
      "the embedded database's shared buffers (Postgres' 128MB default is what made it big: its WASM memory never shrinks); raise it for large knowledge bases on PGlite, up to 1536MB (it does not start with 2GB)",
  },
  pgliteCompiler: {
    meaning:
      "how `plinth serve` compiles the embedded database (Postgres built to WebAssembly). `baseline`: V8's baseline compiler only, which keeps an idle server ≈ 45 MB smaller (the optimizing compiler's work at start stays resident). `optimizing`: hot code is recompiled optimized, ≈ 1.3× faster heavy SQL and up to 1.75× faster HNSW index builds on PGlite; the agent round measured the same either way. It applies to the whole process's WebAssembly and is set before the database opens; Node flags of the operator's own (`--liftoff-only`, `--no-wasm-tier-up`) win. No effect on Postgres (see [the benchmarks](benchmarks.md#start-and-cli-latency))",
  },
  pgPrepare: {
    meaning:
      "each pooled Postgres connection, and the embedded database's session, prepares the statements it repeats (parsed once instead of on every call); set `false` behind a connection pooler in transaction mode that cannot keep prepared statements. On the embedded database it roughly halves the server's CPU per agent round (see [Storage](../guides/operating.md#storage)); `false` there only serves to compare. After `plinth migrate` changes tables under running servers, restart them: a prepared `select *` refuses a changed row type until its connection is renewed (the embedded database prepares it again by itself)",
  },
  pgSynchronousCommit: {
    meaning:
      "on Postgres, whether the server's commits wait for their WAL to reach disk (the database's `synchronous_commit`). `false`: a Postgres crash (not Plinth's) may lose the writes of its last few hundred milliseconds — runs' steps, messages, audit entries — after they were answered, though the database stays consistent and the audit chain verifies, and a tool call whose record was lost may run again when its run resumes; in exchange for shorter waits on the commits of runs' steps and agents' tool calls (see [Storage](../guides/operating.md#storage); audited dispatches without a run already share their commits: [grouped dispatch steps](../guides/scaling.md#grouped-dispatch-steps))",
  },
  'webhooks.allowPrivate': {
    meaning:
      'webhooks may reach loopback, private, link-local and metadata addresses, and use plain http (tests, on-prem receivers); off: https to public addresses only',
  },
  'webhooks.retryBaseMs': { meaning: "a failed webhook attempt's first retry; each next one doubles (± 20 % jitter)" },
  'webhooks.retryWindowMs': { meaning: 'how long a webhook message is retried before it fails for good' },
  'webhooks.timeoutMs': { meaning: "one webhook attempt's deadline" },
  'webhooks.disableAfter': {
    meaning: 'messages in a row that fail for good before a webhook is disabled (`webhook.disabled`)',
  },
  'webhooks.secretGraceMs': { meaning: 'after a secret rotation, how long the old secret signs too' },
}
