-- Signed webhooks (docs/webhooks.md): a project's subscriptions, the transactional outbox written in
-- the same statement as the event it reports, and every delivery attempt.

create table webhooks (
  id                    text primary key,
  project_id            text not null references projects (id),
  url                   text not null,
  events                text[] not null,
  description           text,
  -- `whsec_` + base64: HMAC signing needs the secret itself (it is never shown again after create/rotate).
  secret                text not null,
  -- After a rotation the old secret signs too (a second signature) until this time.
  previous_secret       text,
  previous_secret_until timestamptz,
  enabled               boolean not null default true,
  disabled_reason       text,
  disabled_at           timestamptz,
  -- Messages in a row that failed for good, and the first failed attempt since the last success.
  failed_messages       integer not null default 0,
  failing_since         timestamptz,
  created_by            text not null references users (id),
  created_at            timestamptz not null default now(),
  updated_at            timestamptz not null default now()
);
-- The outbox's join (a project's subscriptions) and the listing.
create index webhooks_project_idx on webhooks (project_id, id);

-- One message per (subscription, event). `next_attempt_at` is also the lease: a claim moves it past the
-- attempt's deadline, so a message whose instance died becomes due again by itself.
create table webhook_messages (
  id              bigint generated always as identity primary key,
  webhook_id      text not null references webhooks (id) on delete cascade,
  event_id        bigint not null,
  event_type      text not null,
  status          text not null default 'pending' check (status in ('pending', 'delivered', 'failed')),
  -- The JSON body, rendered at the first attempt and sent unchanged by every later one.
  payload         text,
  attempts        integer not null default 0,
  next_attempt_at timestamptz not null default now(),
  lease_owner     text,
  -- Retries stop this long after it (the creation, or a redelivery).
  window_start    timestamptz not null default now(),
  created_at      timestamptz not null default now(),
  delivered_at    timestamptz
);
create index webhook_messages_due_idx on webhook_messages (next_attempt_at) where status = 'pending';
create index webhook_messages_list_idx on webhook_messages (webhook_id, id);

create table webhook_attempts (
  id              bigint generated always as identity primary key,
  message_id      bigint not null references webhook_messages (id) on delete cascade,
  attempt         integer not null,
  started_at      timestamptz not null,
  duration_ms     integer not null,
  status_code     integer,
  error           text,
  next_attempt_at timestamptz
);
create index webhook_attempts_message_idx on webhook_attempts (message_id, id);
