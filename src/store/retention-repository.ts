import { sql } from 'kysely'
import { kysely, type Executor } from './executor.js'

/**
 * Deletes up to `limit` events of runs that ended before `endedBefore` (docs/guides/operating.md#retention):
 * the streams' replay of old runs. Their messages, tool calls, usage and audit entries stay. An event
 * a webhook message has yet to render (its first attempt not made) is kept until it has.
 */
export async function deleteOldRunEvents(db: Executor, endedBefore: Date, limit: number): Promise<number> {
  const result = await sql`
    delete from events where id in (
      select e.id from runs r join events e on e.run_id = r.id
      where r.ended_at < ${endedBefore}
        and not exists (select 1 from webhook_messages m where m.event_id = e.id and m.payload is null)
      limit ${limit})`.execute(kysely(db))
  return Number(result.numAffectedRows ?? 0n)
}

/** Takes the retention sweepers' lock for this transaction (one instance sweeps at a time); false when held. */
export async function lockRetentionSweep(tx: Executor): Promise<boolean> {
  const { rows } = await sql<{ ok: boolean }>`select pg_try_advisory_xact_lock(7261524302) as ok`.execute(kysely(tx))
  return rows[0]?.ok === true
}
