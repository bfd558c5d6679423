-- Command bus: plugin key-value store, dispatches, HITL decisions, session allowances, hash-chained audit log.

create table plugin_kv (
  plugin     text not null,
  key        text not null,
  value      jsonb not null,
  updated_at timestamptz not null default now(),
  primary key (plugin, key)
);

-- One row per dispatch: its current state, what an approval needs to run it, and its idempotency key.
create table dispatches (
  id              text primary key,
  command_id      text not null,
  plugin          text not null,
  plugin_version  text not null,
  entrance        text not null,
  actor           jsonb not null,
  -- the user on whose behalf the dispatch runs
  owner_id        text not null references users (id),
  project_id      text,
  conversation_id text,
  run_id          text,
  call_id         text,
  idempotency_key text,
  params          jsonb not null,
  params_hash     text not null,
  risk            text not null,
  status          text not null,
  decision_id     text,
  result          jsonb,
  error           jsonb,
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now()
);
create unique index dispatches_idempotency_key on dispatches (owner_id, idempotency_key) where idempotency_key is not null;
create index dispatches_owner_idx on dispatches (owner_id, id);
create index dispatches_project_idx on dispatches (project_id, id);

create table decisions (
  id              text primary key,
  dispatch_id     text not null references dispatches (id),
  owner_id        text not null references users (id),
  project_id      text,
  conversation_id text,
  run_id          text,
  call_id         text,
  command_id      text not null,
  params          jsonb not null,
  preview         text,
  risk            text not null,
  reasons         jsonb not null,
  status          text not null default 'pending' check (status in ('pending', 'approved', 'rejected', 'expired')),
  scope           text check (scope in ('once', 'session')),
  decided_by      text,
  note            text,
  created_at      timestamptz not null default now(),
  expires_at      timestamptz not null,
  decided_at      timestamptz
);
create index decisions_owner_status_idx on decisions (owner_id, status, id);
create index decisions_conversation_idx on decisions (conversation_id, status);

create table allowances (
  id              text primary key,
  conversation_id text not null,
  command_id      text not null,
  params_hash     text not null,
  decision_id     text not null,
  created_by      text not null,
  created_at      timestamptz not null default now(),
  expires_at      timestamptz not null
);
create index allowances_lookup_idx on allowances (conversation_id, command_id, params_hash);

-- Append-only. Each entry stores the hash of the one before it, so an altered, removed or reordered
-- entry breaks the chain (`plinth audit verify`). Rows are never updated or deleted.
create table audit_log (
  id              bigint primary key,
  dispatch_id     text,
  step            text not null,
  owner_id        text,
  project_id      text,
  conversation_id text,
  command_id      text,
  entrance        text,
  envelope        jsonb not null,
  prev_hash       text not null,
  hash            text not null,
  created_at      timestamptz not null
);
create sequence audit_log_id_seq owned by audit_log.id;
create index audit_log_dispatch_idx on audit_log (dispatch_id, id);
