-- When a message's current attempt was claimed: an attempt whose instance died is logged as started
-- then (docs/webhooks.md, the delivery log), whatever happened to its lease since (an embedded server
-- releases its claims at start).
alter table webhook_messages add column claimed_at timestamptz;
