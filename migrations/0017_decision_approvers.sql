-- Who alone may approve a decision (user ids), when the operator designates approvers for executions on
-- the server itself (exec.directApprovers): a second person, never the one who asked.
alter table decisions add column approvers jsonb;
