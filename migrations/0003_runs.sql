-- Agent runs and the tool-call ledger.

create table runs (
  id               text primary key,
  conversation_id  text not null references conversations (id),
  project_id       text not null references projects (id),
  owner_id         text not null references users (id),
  model            text not null,
  status           text not null check (status in ('queued', 'running', 'requires_action', 'completed', 'failed', 'cancelled', 'expired')),
  phase            text check (phase in ('thinking', 'tool_called', 'tool_running', 'tool_done', 'finalizing')),
  iteration        integer not null default 0,
  max_iterations   integer not null,
  approval_policy  text not null default 'ask' check (approval_policy in ('ask', 'dontAsk')),
  client_tools     jsonb not null default '[]',
  required_action  jsonb,
  error            jsonb,
  usage            jsonb not null default '{"inputTokens":0,"outputTokens":0}',
  cancel_reason    text,
  lease_owner      text,
  lease_expires_at timestamptz,
  created_at       timestamptz not null default now(),
  updated_at       timestamptz not null default now(),
  started_at       timestamptz,
  ended_at         timestamptz
);
-- At most one run per conversation is running or waiting for a human, across every server instance.
create unique index runs_one_active on runs (conversation_id) where status in ('running', 'requires_action');
create index runs_conversation_idx on runs (conversation_id, id);
create index runs_status_idx on runs (status, lease_expires_at);

-- Every assistant tool call gets exactly one terminal result, written with the state change that ends it.
create table run_tool_calls (
  id               text primary key,
  run_id           text not null references runs (id),
  message_id       text not null,
  iteration        integer not null,
  seq              integer not null,
  provider_call_id text not null,
  name             text not null,
  command_id       text,
  kind             text not null check (kind in ('command', 'client', 'unknown')),
  args             jsonb,
  raw_args         text not null,
  risk             text,
  status           text not null default 'pending'
                   check (status in ('pending', 'running', 'awaiting_decision', 'awaiting_output', 'ok', 'error', 'rejected', 'cancelled', 'expired', 'interrupted')),
  output           jsonb,
  model_output     text,
  model_truncated  boolean not null default false,
  dispatch_id      text,
  decision_id      text,
  repeat_of        text,
  created_at       timestamptz not null default now(),
  started_at       timestamptz,
  ended_at         timestamptz
);
create index run_tool_calls_run_idx on run_tool_calls (run_id, iteration, seq);
