-- How much disk each conversation's work directory uses, as last measured (after each execution and
-- kept up to date by the server's own writes and deletes): the per-conversation and per-user quotas
-- are checked against it.
create table work_usage (
  conversation_id text primary key references conversations (id),
  owner_id        text not null references users (id),
  bytes           bigint not null default 0,
  files           integer not null default 0,
  measured_at     timestamptz not null default now()
);
create index work_usage_owner_idx on work_usage (owner_id);
