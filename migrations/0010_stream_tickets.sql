-- Single-use, short-lived tickets that let a browser's EventSource (which cannot send Authorization)
-- open one event stream. Only the ticket's sha256 is stored; redeeming deletes the row.
create table stream_tickets (
  ticket_hash text primary key,
  token_id    text not null,
  path        text not null,
  expires_at  timestamptz not null
);
create index stream_tickets_expiry_idx on stream_tickets (expires_at);
