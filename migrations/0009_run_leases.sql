-- A run's lease is its single writer's fencing token (one per acquisition, not per process); resumes
-- counts automatic takeovers after a crash or shutdown (bounded); waiting_since is when the run started
-- waiting for humans or client tools (its action TTL runs from there, not from its last partial answer).
alter table runs add column resumes integer not null default 0;
alter table runs add column waiting_since timestamptz;
update runs set waiting_since = updated_at where status = 'requires_action';
create index runs_waiting_idx on runs (waiting_since) where status = 'requires_action';
create index runs_running_lease_idx on runs (lease_expires_at) where status = 'running';
