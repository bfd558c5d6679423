import { sql } from 'kysely'
import type { JsonValue } from './database.js'
import { storableJson } from './storable.js'
import { kysely, type Executor } from './executor.js'

/** The channel on which changed settings are announced to every server instance. */
export const settingsChannel = 'plinth_settings'

export async function getSetting(db: Executor, key: string): Promise<JsonValue | undefined> {
  const row = await kysely(db).selectFrom('settings').select('value').where('key', '=', key).executeTakeFirst()
  return row?.value
}

/** Stores a setting and announces it (on commit, when inside a transaction). */
export async function setSetting(db: Executor, key: string, value: JsonValue): Promise<void> {
  await kysely(db)
    .insertInto('settings')
    .values({ key, value: storableJson(value) })
    .onConflict((conflict) =>
      conflict.column('key').doUpdateSet({ value: storableJson(value), updated_at: new Date() }),
    )
    .execute()
  await sql`select pg_notify(${settingsChannel}, ${key})`.execute(kysely(db))
}

/** In-process fan-out of setting changes (from this and every other instance). */
export class SettingsSignals {
  readonly #listeners = new Set<(key: string | null) => void>()

  subscribe(listener: (key: string | null) => void): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  /** A notification's key; none (the listener reconnected) means any setting may have changed. */
  deliver(payload?: string): void {
    for (const listener of this.#listeners) listener(payload ?? null)
  }
}
