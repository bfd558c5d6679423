-- A user's runs that hold or wait for model time, counted when a new run starts (the per-user cap).
create index runs_owner_active_idx on runs (owner_id) where status in ('queued', 'running');
