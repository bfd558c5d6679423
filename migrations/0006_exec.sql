-- Operator settings that change at run time (e.g. the exec backend), shared by every instance.
create table settings (
  key        text primary key,
  value      jsonb not null,
  updated_at timestamptz not null default now()
);

-- Operator-declared runtime directories (exec.runtimes) a project mounts read-only into its sandbox.
alter table projects add column runtimes jsonb not null default '[]';
