-- Foundation: identity, projects, conversations, messages, the durable event log, idempotency records.
create extension if not exists vector;

create table users (
  id          text primary key,
  name        text not null,
  disabled_at timestamptz,
  created_at  timestamptz not null default now()
);
create unique index users_name_key on users (name);

create table api_tokens (
  id           text primary key,
  user_id      text not null references users (id),
  name         text not null,
  -- sha256 of the secret, hex; the secret itself is shown once and never stored
  token_hash   text not null unique,
  prefix       text not null,
  created_at   timestamptz not null default now(),
  last_used_at timestamptz,
  revoked_at   timestamptz
);
create index api_tokens_user_idx on api_tokens (user_id, id);

create table projects (
  id          text primary key,
  owner_id    text not null references users (id),
  name        text not null,
  description text not null default '',
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now(),
  deleted_at  timestamptz
);
create index projects_owner_idx on projects (owner_id, id) where deleted_at is null;

create table conversations (
  id              text primary key,
  project_id      text not null references projects (id),
  owner_id        text not null references users (id),
  title           text not null default '',
  permission_mode text not null default 'manual' check (permission_mode in ('manual', 'risky', 'full')),
  mode_expires_at timestamptz,
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now(),
  deleted_at      timestamptz
);
create index conversations_project_idx on conversations (project_id, id) where deleted_at is null;

create table messages (
  id              text primary key,
  conversation_id text not null references conversations (id),
  run_id          text,
  role            text not null check (role in ('system', 'user', 'assistant', 'tool')),
  content         text,
  tool_calls      jsonb,
  tool_call_id    text,
  status          text not null default 'completed',
  created_at      timestamptz not null default now()
);
create index messages_conversation_idx on messages (conversation_id, id);

-- The durable event log behind every SSE stream. Ids are assigned under an advisory lock held until
-- commit (see event-log.ts), so they become visible in strictly increasing order.
create table events (
  id              bigserial primary key,
  type            text not null,
  project_id      text,
  conversation_id text,
  run_id          text,
  -- the user the event is about (conversation owner, or project owner for project-level events)
  user_id         text,
  data            jsonb not null,
  created_at      timestamptz not null default now()
);
create index events_project_idx on events (project_id, id);
create index events_conversation_idx on events (conversation_id, id);
create index events_run_idx on events (run_id, id);

create table idempotency_keys (
  user_id      text not null,
  key          text not null,
  request_hash text not null,
  status_code  integer not null,
  response     jsonb not null,
  created_at   timestamptz not null default now(),
  primary key (user_id, key)
);
