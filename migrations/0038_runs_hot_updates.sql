-- A running run's row is updated by every statement of its rounds and by its lease's heartbeat: the
-- lease's expiry, the phase, the iteration, the usage. With none of those columns in an index, such an
-- update is HOT (heap-only): it adds no entry to the table's indexes and writes less WAL
-- (docs/reference/benchmarks.md#the-round-on-postgres). The sweeper's look for lapsed leases reads
-- the running runs (a few hundred at most) and checks their expiry.
drop index runs_running_lease_idx;
create index runs_running_idx on runs (id) where status = 'running';
drop index runs_status_idx;
create index runs_status_idx on runs (status);
-- Room on each page for a row's next version, so that it can stay on the page.
alter table runs set (fillfactor = 80);
