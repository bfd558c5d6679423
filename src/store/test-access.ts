import type { Kysely } from 'kysely'
import type { Database } from './database.js'
import { executorOf, kysely, type Executor } from './executor.js'

// Test-only: raw queries for setup and assertions in test/ and bench/ (lint allows this file nowhere
// else; the app reaches the database through the store's named functions).

export { sql } from 'kysely'

/** A handle repository functions take, on a Kysely instance or transaction a test opened itself. */
export function testExecutor(db: Kysely<Database>): Executor {
  return executorOf(db)
}

/** The Kysely instance behind the store (or a transaction's `tx`). */
export function testDb(executor: Executor): Kysely<Database> {
  return kysely(executor)
}
