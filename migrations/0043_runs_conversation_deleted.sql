-- Whether a run's conversation is deleted (or purged), kept on the run so that `GET /api/runs` can leave
-- such runs out without looking up each run's conversation (docs/reference/http-api.md). They were listed
-- and answered 404 when opened. A join on conversations for every listed run cost a user with 20,000
-- runs of deleted conversations 300–440 ms a page; a column of the run's own row costs a filter. The rows
-- stay: usage and the audit refer to them.
alter table runs add column conversation_deleted boolean not null default false;
update runs r set conversation_deleted = true
  from conversations c where c.id = r.conversation_id and c.deleted_at is not null;
-- The caller's listed runs, newest first: without it the list walked the whole table's primary key
-- backwards past every other user's runs (36 ms a page with 200,000 of them; 0.08 ms with it). Its
-- columns are never changed by a running run's updates, so those stay HOT.
create index runs_owner_listed_idx on runs (owner_id, id) where not conversation_deleted;
