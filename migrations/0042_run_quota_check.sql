-- A new run's quotas counted again as it is written (docs/guides/operating.md#run-quotas). The counts read
-- with the request's access check were taken before any of the runs asked for at the same moment had
-- committed, so a burst passed them together (12 of 12 runs accepted against a limit of 2). The run's
-- statement calls this once it holds the event log's lock, which every run's creation holds until it
-- commits; a VOLATILE function's queries see what committed before each of them began, so these counts
-- include every run created before this one. Over a limit it raises PL429 and the statement writes nothing.
-- A null limit is not counted. In queue mode the runs waiting for a quota hold no slot, and a minute's
-- runs are those that started in it (as the request's own counts, src/store/run-quota-repository.ts).
create function plinth_check_run_quota(
  p_run_id text, p_owner text, p_project text, p_queue_mode boolean,
  p_user_active int, p_project_active int, p_user_per_minute int, p_project_per_minute int,
  p_user_queued int
) returns boolean language plpgsql volatile as $$
declare
  over boolean := false;
begin
  if p_user_active is not null then
    over := (select count(*) from runs r where r.owner_id = p_owner and r.id <> p_run_id
               and r.status in ('queued', 'running')
               and (r.status = 'running' or not p_queue_mode or r.queued_for is null)) >= p_user_active;
  end if;
  if not over and p_project_active is not null then
    over := (select count(*) from runs r where r.project_id = p_project and r.id <> p_run_id
               and r.status in ('queued', 'running')
               and (r.status = 'running' or not p_queue_mode or r.queued_for is null)) >= p_project_active;
  end if;
  if not over and p_user_per_minute is not null then
    over := case when p_queue_mode
      then (select count(*) from runs r where r.owner_id = p_owner and r.id <> p_run_id
              and r.started_at > now() - interval '60 seconds')
      else (select count(*) from runs r where r.owner_id = p_owner and r.id <> p_run_id
              and r.created_at > now() - interval '60 seconds')
    end >= p_user_per_minute;
  end if;
  if not over and p_project_per_minute is not null then
    over := case when p_queue_mode
      then (select count(*) from runs r where r.project_id = p_project and r.id <> p_run_id
              and r.started_at > now() - interval '60 seconds')
      else (select count(*) from runs r where r.project_id = p_project and r.id <> p_run_id
              and r.created_at > now() - interval '60 seconds')
    end >= p_project_per_minute;
  end if;
  -- A run queued for a quota (queue mode): the user's runs waiting so are bounded too.
  if not over and p_user_queued is not null then
    over := (select count(*) from runs r where r.owner_id = p_owner and r.id <> p_run_id
               and r.status = 'queued' and r.queued_for = 'quota') >= p_user_queued;
  end if;
  if over then
    raise exception 'a run quota is over' using errcode = 'PL429';
  end if;
  return true;
end
$$;
