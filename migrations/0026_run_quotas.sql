-- Run quotas (docs/guides/operating.md#run-quotas): a project's own limits, set by the operator, and the
-- indexes the counts behind every quota read (active runs per project; runs started in the last minute).

alter table projects add column quota jsonb;
create index runs_project_active_idx on runs (project_id) where status in ('queued', 'running');
create index runs_owner_created_idx on runs (owner_id, created_at);
create index runs_project_created_idx on runs (project_id, created_at);
