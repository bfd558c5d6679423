-- Bytes of an event's JSON data, written with the event, so a replay page can be bounded by size
-- without reading (or detoasting) the data of events past the budget.
alter table events add column size integer;

-- What an idempotency key stands for: command, params, entrance and the project and conversation
-- the caller named. The same key with any of them different is refused instead of replayed.
alter table dispatches add column request_hash text;
