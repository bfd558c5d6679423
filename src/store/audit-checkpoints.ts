import { createHmac, timingSafeEqual } from 'node:crypto'
import { sql } from 'kysely'
import { canonicalJson } from './canonical-json.js'
import { kysely, type Executor } from './executor.js'

/**
 * Where the audit chain starts after retention removed its oldest entries (docs/guides/operating.md#retention):
 * the first entry kept links to `throughHash`, the hash of the last one removed.
 */
export interface AuditCheckpoint {
  throughId: number
  throughHash: string
  /** The first entry this deletion removed, and how many it removed. */
  firstId: number
  removed: number
  createdAt: string
  signature: string
}

type Signed = Omit<AuditCheckpoint, 'signature'>

/** The checkpoint key: derived from the server's secret key, so it is never the key that seals credentials. */
function checkpointKey(secretKey: string): Buffer {
  return createHmac('sha256', secretKey).update('plinth audit checkpoint v1').digest()
}

/** HMAC-SHA256 of the checkpoint's fields (canonical JSON). */
export function signAuditCheckpoint(checkpoint: Signed, secretKey: string): string {
  const { throughId, throughHash, firstId, removed, createdAt } = checkpoint
  return createHmac('sha256', checkpointKey(secretKey))
    .update(canonicalJson({ throughId, throughHash, firstId, removed, createdAt }))
    .digest('hex')
}

export function auditCheckpointSigned(checkpoint: AuditCheckpoint, secretKey: string): boolean {
  const expected = Buffer.from(signAuditCheckpoint(checkpoint, secretKey), 'hex')
  const given = Buffer.from(checkpoint.signature, 'hex')
  return given.length === expected.length && timingSafeEqual(given, expected)
}

/** The newest checkpoint (the furthest the chain was cut), if retention ever removed entries. */
export async function readAuditCheckpoint(db: Executor): Promise<AuditCheckpoint | undefined> {
  const { rows } = await sql<{
    through_id: string
    through_hash: string
    first_id: string
    removed: string
    created_at: Date
    signature: string
  }>`select through_id, through_hash, first_id, removed, created_at, signature
     from audit_checkpoints order by through_id desc limit 1`.execute(kysely(db))
  const row = rows[0]
  if (!row) return undefined
  return {
    throughId: Number(row.through_id),
    throughHash: row.through_hash,
    firstId: Number(row.first_id),
    removed: Number(row.removed),
    createdAt: row.created_at.toISOString(),
    signature: row.signature,
  }
}

/**
 * Removes up to `limit` of the chain's oldest entries created before `before`, as a prefix (never a
 * hole), and records a signed checkpoint naming the last one removed, in the caller's transaction.
 * Returns how many went.
 */
export async function pruneAuditLog(tx: Executor, before: Date, limit: number, secretKey: string): Promise<number> {
  const db = kysely(tx)
  const { rows } = await sql<{ id: string; hash: string; created_at: Date }>`
    select id, hash, created_at from audit_log order by id limit ${limit}`.execute(db)
  let last = -1
  while (last + 1 < rows.length && rows[last + 1]!.created_at < before) last++
  if (last < 0) return 0
  const through = rows[last]!
  const checkpoint: Signed = {
    throughId: Number(through.id),
    throughHash: through.hash,
    firstId: Number(rows[0]!.id),
    removed: last + 1,
    createdAt: new Date().toISOString(),
  }
  await sql`delete from audit_log where id <= ${through.id}`.execute(db)
  await sql`insert into audit_checkpoints (through_id, through_hash, first_id, removed, created_at, signature)
            values (${checkpoint.throughId}, ${checkpoint.throughHash}, ${checkpoint.firstId}, ${checkpoint.removed},
                    ${checkpoint.createdAt}::timestamptz, ${signAuditCheckpoint(checkpoint, secretKey)})`.execute(db)
  return checkpoint.removed
}
