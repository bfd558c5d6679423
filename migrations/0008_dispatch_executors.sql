-- Which server process runs a dispatch, and until when it vouches for it (renewed while it runs): a
-- dispatch still `running` past that was orphaned by a crash and is ended `interrupted` by the sweeper.
alter table dispatches add column executor text;
alter table dispatches add column executor_expires_at timestamptz;
create index dispatches_running_idx on dispatches (executor_expires_at) where status = 'running';
