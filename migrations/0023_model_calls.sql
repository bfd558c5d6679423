-- Every model call's usage and cost (docs/guides/operating.md#usage-and-cost), written in the statement of
-- the turn that made it: what GET /api/usage aggregates per run, conversation, project, user and model.

create table model_calls (
  id                  text primary key,
  run_id              text not null references runs (id),
  conversation_id     text not null,
  project_id          text not null,
  owner_id            text not null,
  model               text not null,
  input_tokens        bigint not null default 0,
  output_tokens       bigint not null default 0,
  cached_input_tokens bigint not null default 0,
  reasoning_tokens    bigint not null default 0,
  -- Null: the model has no price in the configuration.
  cost                double precision,
  created_at          timestamptz not null default now()
);
create index model_calls_owner_idx on model_calls (owner_id, created_at);
create index model_calls_project_idx on model_calls (project_id, created_at);
create index model_calls_run_idx on model_calls (run_id);

alter table runs alter column usage
  set default '{"inputTokens":0,"outputTokens":0,"cachedInputTokens":0,"reasoningTokens":0,"modelCalls":0,"cost":null}';
