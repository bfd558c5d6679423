-- Scheduled runs (docs/guides/schedules.md): a project's schedules, and each occurrence that came due.
-- An occurrence is claimed (its firing row written, the schedule's next_fire_at moved on) in one
-- transaction under FOR UPDATE SKIP LOCKED, so exactly one instance fires it; the unique index is the
-- last guard. A firing stays `pending` until its run exists; one pending too long (its instance died)
-- is fired by another, and the run is tied to it in the run's own transaction, so it starts once (a
-- command target's dispatch carries the firing as its idempotency key, so a retry finds it).

create table schedules (
  id              text primary key,
  project_id      text not null references projects (id),
  owner_id        text not null references users (id),
  name            text not null default '',
  cron            text,
  every           text,
  at              timestamptz,
  timezone        text not null default 'UTC',
  target          jsonb not null,
  enabled         boolean not null default true,
  missed          text not null default 'skip' check (missed in ('skip', 'fireOnce')),
  next_fire_at    timestamptz,
  last_fired_at   timestamptz,
  last_run_id     text,
  -- Why the server stopped it (e.g. its owner lost access); null while it runs or was paused by hand.
  stopped_reason  text,
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now(),
  deleted_at      timestamptz,
  check (num_nonnulls(cron, every, at) = 1)
);
create index schedules_due_idx on schedules (next_fire_at) where enabled and deleted_at is null;
create index schedules_project_idx on schedules (project_id, id) where deleted_at is null;

create table schedule_firings (
  id               text primary key,
  schedule_id      text not null references schedules (id),
  occurrence       timestamptz not null,
  manual           boolean not null default false,
  status           text not null check (status in ('pending', 'started', 'failed', 'missed')),
  conversation_id  text,
  run_id           text,
  -- A command target's dispatch (its own outcome and audit entries are the dispatch's).
  dispatch_id      text,
  error            jsonb,
  -- Occurrences skipped with this one (a `missed` firing after downtime, or a `fireOnce` catch-up).
  missed_count     integer not null default 0,
  claimed_at       timestamptz not null default now(),
  created_at       timestamptz not null default now()
);
create unique index schedule_firings_occurrence_idx on schedule_firings (schedule_id, occurrence) where not manual;
create index schedule_firings_pending_idx on schedule_firings (claimed_at) where status = 'pending';
create index schedule_firings_schedule_idx on schedule_firings (schedule_id, id);
