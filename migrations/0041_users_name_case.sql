-- A user's name is unique regardless of case (docs/reference/cli.md). Until now only the exact name had
-- a unique index, and the case-insensitive check before an insert could race: two requests at once for
-- `casex` and `CASEX` both passed it. Names that already clash that way keep the oldest; each other
-- one gets its id appended, so that the index can be built and every user can still be told apart.
update users u set name = u.name || ' (' || u.id || ')'
  where exists (select 1 from users o where lower(o.name) = lower(u.name) and o.id < u.id);
create unique index users_name_lower_key on users (lower(name));
drop index users_name_key;
