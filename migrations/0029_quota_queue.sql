-- Run quotas' queue mode (docs/guides/operating.md#run-quotas): a run over a quota waits as `queued`
-- with `queued_for = 'quota'` until every instance's promoter finds room; runs started per minute are
-- counted by when they started.

alter table runs add column queued_for text;
create index runs_quota_queue_idx on runs (id) where status = 'queued' and queued_for = 'quota';
create index runs_owner_started_idx on runs (owner_id, started_at);
create index runs_project_started_idx on runs (project_id, started_at);
