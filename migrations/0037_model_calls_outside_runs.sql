-- A conversation compacted on request (POST /api/conversations/:id/compact) calls the model outside any
-- run: that call's usage and cost are recorded too, with no run (docs/guides/agent-runs.md#context-compaction).

alter table model_calls alter column run_id drop not null;
