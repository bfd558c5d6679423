import type { JsonValue } from './database.js'
import { storableJson } from './storable.js'
import { kysely, type Executor } from './executor.js'

export interface IdempotencyRecord {
  requestHash: string
  statusCode: number
  response: JsonValue
}

export async function findIdempotencyRecord(
  db: Executor,
  userId: string,
  key: string,
): Promise<IdempotencyRecord | undefined> {
  const row = await kysely(db)
    .selectFrom('idempotency_keys')
    .select(['request_hash', 'status_code', 'response'])
    .where('user_id', '=', userId)
    .where('key', '=', key)
    .executeTakeFirst()
  return row && { requestHash: row.request_hash, statusCode: row.status_code, response: row.response }
}

/**
 * Records the outcome of a creating request in the same transaction as the creation. Returns false
 * when a concurrent request with the same key got there first (the caller rolls back and replays).
 */
export async function saveIdempotencyRecord(
  tx: Executor,
  userId: string,
  key: string,
  record: IdempotencyRecord,
): Promise<boolean> {
  const row = await kysely(tx)
    .insertInto('idempotency_keys')
    .values({
      user_id: userId,
      key,
      request_hash: record.requestHash,
      status_code: record.statusCode,
      response: storableJson(record.response),
    })
    .onConflict((conflict) => conflict.columns(['user_id', 'key']).doNothing())
    .returning('key')
    .executeTakeFirst()
  return row !== undefined
}
