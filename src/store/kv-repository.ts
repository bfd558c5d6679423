import { sql } from 'kysely'
import type { JsonValue } from './database.js'
import { storableJson } from './storable.js'
import { kysely, type Executor } from './executor.js'
import type { Store } from './open-store.js'

/** A plugin's namespaced key-value store. */
export async function kvGet(db: Executor, plugin: string, key: string): Promise<JsonValue | undefined> {
  const row = await kysely(db)
    .selectFrom('plugin_kv')
    .select('value')
    .where('plugin', '=', plugin)
    .where('key', '=', key)
    .executeTakeFirst()
  return row?.value
}

export async function kvSet(db: Executor, plugin: string, key: string, value: JsonValue): Promise<void> {
  await kysely(db)
    .insertInto('plugin_kv')
    .values({ plugin, key, value: storableJson(value) })
    .onConflict((conflict) =>
      conflict.columns(['plugin', 'key']).doUpdateSet({ value: storableJson(value), updated_at: new Date() }),
    )
    .execute()
}

/**
 * Reads and rewrites one key under a transaction-scoped advisory lock on (plugin, key): updates of the
 * same key, from any instance, take turns (a row lock cannot hold a key that has no row yet).
 */
export async function kvUpdate(
  store: Store,
  plugin: string,
  key: string,
  change: (current: JsonValue | undefined) => JsonValue | undefined,
): Promise<JsonValue | undefined> {
  return store.transaction(async (tx) => {
    await sql`select pg_advisory_xact_lock(hashtextextended(${`plugin_kv:${plugin}:${key}`}, 0))`.execute(kysely(tx))
    const next = change(await kvGet(tx, plugin, key))
    if (next === undefined) await kvDelete(tx, plugin, key)
    else await kvSet(tx, plugin, key, next)
    return next
  })
}

export async function kvDelete(db: Executor, plugin: string, key: string): Promise<void> {
  await kysely(db).deleteFrom('plugin_kv').where('plugin', '=', plugin).where('key', '=', key).execute()
}

export async function kvList(
  db: Executor,
  plugin: string,
  prefix = '',
): Promise<Array<{ key: string; value: JsonValue }>> {
  let query = kysely(db).selectFrom('plugin_kv').select(['key', 'value']).where('plugin', '=', plugin).orderBy('key')
  // starts_with, not a range: a range depends on the database's collation.
  if (prefix) query = query.where(sql<boolean>`starts_with(key, ${prefix})`)
  return query.execute()
}
