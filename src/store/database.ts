import type { ColumnType, Generated } from 'kysely'

/** A timestamp column: read as Date, written as Date or ISO string, defaulted by the database. */
type CreatedAt = ColumnType<Date, Date | string | undefined, never>
type NullableTimestamp = ColumnType<Date | null, Date | string | null | undefined, Date | string | null>

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue }
type Json = ColumnType<JsonValue, string, string>
type NullableJson = ColumnType<JsonValue | null, string | null | undefined, string | null>

export interface UsersTable {
  id: string
  name: string
  disabled_at: NullableTimestamp
  created_at: CreatedAt
}

export interface ApiTokensTable {
  id: string
  user_id: string
  name: string
  token_hash: string
  prefix: string
  created_at: CreatedAt
  last_used_at: NullableTimestamp
  revoked_at: NullableTimestamp
}

export interface ProjectsTable {
  id: string
  owner_id: string
  name: string
  description: Generated<string>
  created_at: CreatedAt
  updated_at: ColumnType<Date, Date | string | undefined, Date | string>
  deleted_at: NullableTimestamp
  runtimes: ColumnType<JsonValue, string | undefined, string>
  system_prompt: string | null
  default_model: string | null
  model_params: ColumnType<JsonValue, string | undefined, string>
  tools: NullableJson
  inject_member_knowledge: ColumnType<boolean, boolean | undefined, boolean>
}

export type PermissionMode = 'manual' | 'risky' | 'full'

export interface ConversationsTable {
  id: string
  project_id: string
  owner_id: string
  title: Generated<string>
  permission_mode: ColumnType<PermissionMode, PermissionMode | undefined, PermissionMode>
  mode_expires_at: NullableTimestamp
  created_at: CreatedAt
  updated_at: ColumnType<Date, Date | string | undefined, Date | string>
  deleted_at: NullableTimestamp
}

export interface MessagesTable {
  id: string
  conversation_id: string
  run_id: string | null
  role: 'system' | 'user' | 'assistant' | 'tool'
  content: string | null
  tool_calls: NullableJson
  tool_call_id: string | null
  status: Generated<string>
  created_at: CreatedAt
}

export interface EventsTable {
  id: Generated<string>
  type: string
  project_id: string | null
  conversation_id: string | null
  run_id: string | null
  user_id: string | null
  data: Json
  /** Bytes of `data` as JSON (null on rows written before it was recorded). */
  size: number | null
  created_at: CreatedAt
}

export interface IdempotencyKeysTable {
  user_id: string
  key: string
  request_hash: string
  status_code: number
  response: Json
  created_at: CreatedAt
}

export interface MigrationsTable {
  name: string
  checksum: string
  applied_at: CreatedAt
}

export interface PluginKvTable {
  plugin: string
  key: string
  value: Json
  updated_at: ColumnType<Date, Date | string | undefined, Date | string>
}

export interface McpConnectionsTable {
  user_id: string
  server: string
  state: string | null
  connected: ColumnType<boolean, boolean | undefined, boolean>
  sealed: string
  created_at: ColumnType<Date, Date | string | undefined, never>
  updated_at: ColumnType<Date, Date | string | undefined, Date | string>
}

export interface McpSessionsTable {
  id: string
  user_id: string
  protocol_version: string
  client_capabilities: Json
  client_info: NullableJson
  created_at: ColumnType<Date, Date | string | undefined, never>
  last_seen_at: ColumnType<Date, Date | string | undefined, Date | string>
}

export interface McpElicitationsTable {
  decision_id: string
  session_id: string
  action: string | null
  created_at: ColumnType<Date, Date | string | undefined, never>
  answered_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>
}

export interface DispatchesTable {
  id: string
  command_id: string
  plugin: string
  plugin_version: string
  entrance: string
  actor: Json
  owner_id: string
  project_id: string | null
  conversation_id: string | null
  run_id: string | null
  call_id: string | null
  idempotency_key: string | null
  params: Json
  params_hash: string
  request_hash: string | null
  risk: string
  status: string
  decision_id: string | null
  result: NullableJson
  error: NullableJson
  created_at: CreatedAt
  updated_at: ColumnType<Date, Date | string | undefined, Date | string>
  executor: string | null
  executor_expires_at: NullableTimestamp
}

export interface DecisionsTable {
  id: string
  dispatch_id: string
  owner_id: string
  project_id: string | null
  conversation_id: string | null
  run_id: string | null
  call_id: string | null
  command_id: string
  params: Json
  preview: string | null
  risk: string
  reasons: Json
  status: ColumnType<
    'pending' | 'approved' | 'rejected' | 'expired',
    'pending' | undefined,
    'approved' | 'rejected' | 'expired'
  >
  scope: 'once' | 'session' | null
  decided_by: string | null
  note: string | null
  created_at: CreatedAt
  expires_at: ColumnType<Date, Date | string, Date | string>
  decided_at: NullableTimestamp
  approvers: NullableJson
  kind: ColumnType<'approve' | 'connect', 'approve' | 'connect' | undefined, never>
}

export interface AllowancesTable {
  id: string
  conversation_id: string
  command_id: string
  params_hash: string
  decision_id: string
  created_by: string
  created_at: CreatedAt
  expires_at: ColumnType<Date, Date | string, Date | string>
}

export interface AuditLogTable {
  id: string
  dispatch_id: string | null
  step: string
  owner_id: string | null
  project_id: string | null
  conversation_id: string | null
  command_id: string | null
  entrance: string | null
  envelope: Json
  prev_hash: string
  hash: string
  created_at: ColumnType<Date, Date | string, never>
}

export interface AuditChainTable {
  singleton: Generated<boolean>
  last_id: string
  prev_hash: string
  hash: string
}

export type RunStatus = 'queued' | 'running' | 'requires_action' | 'completed' | 'failed' | 'cancelled' | 'expired'
export type RunPhase = 'thinking' | 'tool_called' | 'tool_running' | 'tool_done' | 'finalizing'
export type ToolCallStatus =
  | 'pending'
  | 'running'
  | 'awaiting_decision'
  | 'awaiting_output'
  | 'ok'
  | 'error'
  | 'rejected'
  | 'cancelled'
  | 'expired'
  | 'interrupted'

export interface RunsTable {
  id: string
  conversation_id: string
  project_id: string
  owner_id: string
  model: string
  status: RunStatus
  phase: RunPhase | null
  iteration: Generated<number>
  max_iterations: number
  approval_policy: 'ask' | 'dontAsk'
  client_tools: Json
  required_action: NullableJson
  error: NullableJson
  usage: ColumnType<JsonValue, string | undefined, string>
  cancel_reason: string | null
  lease_owner: string | null
  lease_expires_at: NullableTimestamp
  created_at: CreatedAt
  updated_at: ColumnType<Date, Date | string | undefined, Date | string>
  started_at: NullableTimestamp
  ended_at: NullableTimestamp
  knowledge: NullableJson
  profile: NullableJson
  resumes: Generated<number>
  waiting_since: NullableTimestamp
}

export interface StreamTicketsTable {
  ticket_hash: string
  token_id: string
  path: string
  expires_at: ColumnType<Date, Date, Date>
}

export interface RunToolCallsTable {
  id: string
  run_id: string
  message_id: string
  iteration: number
  seq: number
  provider_call_id: string
  name: string
  command_id: string | null
  kind: 'command' | 'client' | 'unknown'
  args: NullableJson
  raw_args: string
  risk: string | null
  status: ToolCallStatus
  output: NullableJson
  model_output: string | null
  model_truncated: Generated<boolean>
  dispatch_id: string | null
  decision_id: string | null
  repeat_of: string | null
  created_at: CreatedAt
  started_at: NullableTimestamp
  ended_at: NullableTimestamp
}

export type KnowledgeStatus = 'draft' | 'published'
export type IngestStatus = 'pending' | 'ready' | 'failed'

export interface WorkUsageTable {
  conversation_id: string
  owner_id: string
  bytes: ColumnType<string, number | undefined, number>
  files: ColumnType<number, number | undefined, number>
  measured_at: ColumnType<Date, Date | string | undefined, Date | string>
}

export interface KnowledgeItemsTable {
  id: string
  project_id: string
  owner_id: string
  title: string
  status: ColumnType<KnowledgeStatus, KnowledgeStatus | undefined, KnowledgeStatus>
  ingest_status: ColumnType<IngestStatus, IngestStatus | undefined, IngestStatus>
  ingest_error: string | null
  source: 'text' | 'file' | 'command'
  filename: string | null
  media_type: string | null
  byte_size: number
  body: string | null
  upload: Uint8Array | null
  upload_path: string | null
  chunk_count: ColumnType<number, number | undefined, number>
  ingest_attempts: ColumnType<number, number | undefined, number>
  ingest_lease_until: NullableTimestamp
  created_at: CreatedAt
  updated_at: ColumnType<Date, Date | string | undefined, Date | string>
  published_at: NullableTimestamp
  deleted_at: NullableTimestamp
}

export interface KnowledgeChunksTable {
  id: string
  item_id: string
  project_id: string
  owner_id: string
  published: ColumnType<boolean, boolean | undefined, boolean>
  seq: number
  heading: string
  text: string
  search: string
  embedding: string
}

export interface RagSettingsTable {
  id: number
  embedder: string
  dimensions: number
  updated_at: ColumnType<Date, Date | string | undefined, Date | string>
}

export interface SettingsTable {
  key: string
  value: Json
  updated_at: ColumnType<Date, Date | string | undefined, Date | string>
}

export interface Database {
  users: UsersTable
  api_tokens: ApiTokensTable
  projects: ProjectsTable
  conversations: ConversationsTable
  messages: MessagesTable
  events: EventsTable
  idempotency_keys: IdempotencyKeysTable
  plinth_migrations: MigrationsTable
  plugin_kv: PluginKvTable
  mcp_connections: McpConnectionsTable
  mcp_sessions: McpSessionsTable
  mcp_elicitations: McpElicitationsTable
  dispatches: DispatchesTable
  decisions: DecisionsTable
  allowances: AllowancesTable
  audit_log: AuditLogTable
  audit_chain: AuditChainTable
  runs: RunsTable
  stream_tickets: StreamTicketsTable
  run_tool_calls: RunToolCallsTable
  knowledge_items: KnowledgeItemsTable
  work_usage: WorkUsageTable
  knowledge_chunks: KnowledgeChunksTable
  rag_settings: RagSettingsTable
  settings: SettingsTable
}
