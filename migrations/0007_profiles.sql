-- A project's agent profile: its system prompt, default model and model parameters, and the subset of
-- tools (command ids) its agents may use (null: every exposed tool).
alter table projects add column system_prompt text;
alter table projects add column default_model text;
alter table projects add column model_params jsonb not null default '{}';
alter table projects add column tools jsonb;

-- What a run was started with (the project's prompt and tools, its parameters with the run's
-- overrides), kept so a resumed run sees the same.
alter table runs add column profile jsonb;
