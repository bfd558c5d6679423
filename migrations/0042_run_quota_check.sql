-- A new (or resumed) run's quotas counted again as it is written (docs/guides/operating.md#run-quotas).
-- The counts read with the request's access check were taken before any of the runs asked for at the
-- same moment had committed, so a burst passed them together (12 of 12 runs accepted against a limit of
-- 2). The run's statement calls this after writing the run and before taking the event log's lock. It
-- takes a lock on the user and one on the project (in that order, held until the transaction ends), so
-- runs of the same user or project are counted one after another; a VOLATILE function's queries see
-- what committed before each of them began, so each count includes every run written before it. Over a
-- limit it raises PL429 and the statement writes nothing. A null limit is neither locked nor counted;
-- each count stops at its limit. In queue mode the runs waiting for a quota hold no slot, and a minute's
-- runs are those that started in it (as the request's own counts, src/store/run-quota-repository.ts).
create function plinth_check_run_quota(
  p_run_id text, p_owner text, p_project text, p_queue_mode boolean,
  p_user_active int, p_project_active int, p_user_per_minute int, p_project_per_minute int,
  p_user_queued int
) returns boolean language plpgsql volatile as $$
declare
  over boolean := false;
begin
  if coalesce(p_user_active, p_user_per_minute, p_user_queued) is not null then
    perform pg_advisory_xact_lock(748203, hashtext(p_owner));
  end if;
  if coalesce(p_project_active, p_project_per_minute) is not null then
    perform pg_advisory_xact_lock(748204, hashtext(p_project));
  end if;
  if p_user_active is not null then
    over := (select count(*) from (select 1 from runs r where r.owner_id = p_owner and r.id <> p_run_id
               and r.status in ('queued', 'running')
               and (r.status = 'running' or not p_queue_mode or r.queued_for is null)
               limit p_user_active) s) >= p_user_active;
  end if;
  if not over and p_project_active is not null then
    over := (select count(*) from (select 1 from runs r where r.project_id = p_project and r.id <> p_run_id
               and r.status in ('queued', 'running')
               and (r.status = 'running' or not p_queue_mode or r.queued_for is null)
               limit p_project_active) s) >= p_project_active;
  end if;
  if not over and p_user_per_minute is not null then
    over := case when p_queue_mode
      then (select count(*) from (select 1 from runs r where r.owner_id = p_owner and r.id <> p_run_id
              and r.started_at > now() - interval '60 seconds' limit p_user_per_minute) s)
      else (select count(*) from (select 1 from runs r where r.owner_id = p_owner and r.id <> p_run_id
              and r.created_at > now() - interval '60 seconds' limit p_user_per_minute) s)
    end >= p_user_per_minute;
  end if;
  if not over and p_project_per_minute is not null then
    over := case when p_queue_mode
      then (select count(*) from (select 1 from runs r where r.project_id = p_project and r.id <> p_run_id
              and r.started_at > now() - interval '60 seconds' limit p_project_per_minute) s)
      else (select count(*) from (select 1 from runs r where r.project_id = p_project and r.id <> p_run_id
              and r.created_at > now() - interval '60 seconds' limit p_project_per_minute) s)
    end >= p_project_per_minute;
  end if;
  -- A run queued for a quota (queue mode): the user's runs waiting so are bounded too.
  if not over and p_user_queued is not null then
    over := (select count(*) from (select 1 from runs r where r.owner_id = p_owner and r.id <> p_run_id
               and r.status = 'queued' and r.queued_for = 'quota' limit p_user_queued) s) >= p_user_queued;
  end if;
  if over then
    raise exception 'a run quota is full' using errcode = 'PL429';
  end if;
  return true;
end
$$;
