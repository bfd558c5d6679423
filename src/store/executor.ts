import type { Kysely } from 'kysely'
import type { Database } from './database.js'

/** The query builder over the database or an open transaction: used inside src/store only. */
export type Db = Kysely<Database>

const kyselyKey = Symbol('plinth.store.kysely')

/**
 * What a repository function runs on: the store itself, or the `tx` its `transaction` gives. Outside
 * src/store it is opaque (no query builder): only the store's own functions unwrap it, with `kysely`.
 */
export interface Executor {
  readonly [kyselyKey]: Db
}

/** The Kysely instance (or transaction) a handle stands for. */
export function kysely(executor: Executor): Db {
  return executor[kyselyKey]
}

/** A handle on `db` (a transaction's, or the database's own for the store object). */
export function executorOf(db: Db): Executor {
  return { [kyselyKey]: db }
}
