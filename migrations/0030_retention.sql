-- Retention (docs/guides/operating.md#retention): a project's own retention periods (the shorter of its
-- and the server's applies), conversations whose content was purged, and the audit log's checkpoints.
-- Retention is the one thing that deletes audit entries: only the oldest, as a prefix of the chain, and
-- each deletion leaves a checkpoint signed with the server's secret key naming the entry the chain then
-- starts after, so `plinth audit verify` checks the rest from there.

alter table projects add column retention jsonb;
alter table conversations add column purged_at timestamptz;

create table audit_checkpoints (
  id             bigserial primary key,
  -- the last entry removed: the first entry kept must link to its hash
  through_id     bigint not null,
  through_hash   text not null,
  first_id       bigint not null,
  removed        bigint not null,
  created_at     timestamptz not null,
  -- HMAC-SHA256 of the fields above (canonical JSON) with a key derived from the server's secret key
  signature      text not null
);

create index dispatches_updated_idx on dispatches (updated_at);
create index conversations_idle_idx on conversations (updated_at) where purged_at is null;
create index knowledge_items_draft_idx on knowledge_items (updated_at) where status = 'draft' or deleted_at is not null;
