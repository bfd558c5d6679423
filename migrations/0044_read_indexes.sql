-- Indexes a large database's reads were missing, found by timing every read endpoint on a 15 GB database
-- (500,000 runs, 1.1 million messages, 105,000 decisions, 205,000 dispatches, 1 million webhook messages):
-- A run's messages (the 201 answer of POST …/runs, a cancel closing its streaming turn, a queued run's
-- start): a scan of every message, 96 ms, now 0.06 ms.
create index messages_run_idx on messages (run_id, id);
-- Pending decisions past their deadline (GET /api/decisions and every sweep of every instance), and a
-- run's pending decisions when it ends: scans of every decision, 27 ms, now 0.03–0.06 ms.
create index decisions_pending_expiry_idx on decisions (expires_at) where status = 'pending';
create index decisions_pending_run_idx on decisions (run_id) where status = 'pending';
-- GET /api/decisions: the calls of visible projects and what waits for a designated approver, so that the
-- list's OR is a union of index scans (29 ms, now 0.14 ms).
create index decisions_project_calls_idx on decisions (project_id, id) where conversation_id is null;
create index decisions_approvers_idx on decisions using gin (approvers jsonb_path_ops);
-- Dispatches approved but not started (a crash between the two), looked for on every sweep of every
-- instance: a scan of every dispatch, 67–126 ms.
create index dispatches_awaiting_idx on dispatches (updated_at) where status = 'awaiting_decision';
-- GET /api/audit?conversationId=: 39 ms, now 0.04 ms.
create index dispatches_conversation_idx on dispatches (conversation_id, id);
-- Retention's look for events a webhook has yet to render (per batch of old events, and per idle
-- conversation): a scan of every webhook message, 163 ms a batch.
create index webhook_messages_unrendered_idx on webhook_messages (event_id) where payload is null;
