-- The audit chain's tail in one row. An append updates it (the row lock serialises appends until
-- commit, as the advisory lock it replaces did) and inserts the entry, hashed in SQL, in one statement.
-- It also remembers the newest entry, so removing entries from the end of the log is detected.
create table audit_chain (
  singleton boolean primary key default true check (singleton),
  last_id   bigint not null,
  prev_hash text not null,
  hash      text not null
);
insert into audit_chain (last_id, prev_hash, hash)
select coalesce((select id from audit_log order by id desc limit 1), 0),
       coalesce((select prev_hash from audit_log order by id desc limit 1), repeat('0', 64)),
       coalesce((select hash from audit_log order by id desc limit 1), repeat('0', 64));
drop sequence audit_log_id_seq;
