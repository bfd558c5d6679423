import { sql } from 'kysely'
import type { Store } from './open-store.js'
import { appendEvents, catalogEventType, eventLogLock } from './event-log.js'
import { kysely } from './executor.js'

/**
 * Records that a plugin's commands changed at run time (an MCP server's tools were mounted, replaced
 * or taken down): a `commands.changed` event on every project and conversation stream, data
 * `{plugin, commandIds}`. Skipped when the plugin's last such event already says the same, so several
 * instances mounting one server, or a restart, do not repeat it. Returns whether it was appended.
 */
export async function appendCatalogChange(
  store: Store,
  plugin: string,
  commandIds: readonly string[],
): Promise<boolean> {
  const ids = [...commandIds].sort()
  return store.transaction(async (tx) => {
    // The log's append lock first: two instances mounting one server see each other's event.
    await sql`select pg_advisory_xact_lock(${eventLogLock})`.execute(kysely(tx))
    const { rows } = await sql<{ data: { commandIds?: string[] } }>`
      select data from events where type = ${catalogEventType} and project_id is null and data->>'plugin' = ${plugin}
      order by id desc limit 1`.execute(kysely(tx))
    const last = rows[0]?.data.commandIds
    if (last && last.length === ids.length && last.every((id, index) => id === ids[index])) return false
    await appendEvents(tx, [{ type: catalogEventType, data: { plugin, commandIds: ids } }])
    return true
  })
}
