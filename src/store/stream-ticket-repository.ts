import { createHash, randomBytes } from 'node:crypto'
import type { User } from './user-repository.js'
import { getUser } from './user-repository.js'
import { kysely, type Executor } from './executor.js'

function hashTicket(ticket: string): string {
  return createHash('sha256').update(ticket).digest('hex')
}

/** Issues a single-use ticket for one stream path (e.g. `/api/runs/<id>/events`), valid for `ttlMs`. */
export async function issueStreamTicket(
  db: Executor,
  tokenId: string,
  path: string,
  ttlMs: number,
): Promise<{ ticket: string; expiresAt: string }> {
  const ticket = `pst_${randomBytes(32).toString('base64url')}`
  const expiresAt = new Date(Date.now() + ttlMs)
  // Expired tickets go as new ones are issued: the table stays small without a sweeper.
  await kysely(db).deleteFrom('stream_tickets').where('expires_at', '<', new Date()).execute()
  await kysely(db)
    .insertInto('stream_tickets')
    .values({ ticket_hash: hashTicket(ticket), token_id: tokenId, path, expires_at: expiresAt })
    .execute()
  return { ticket, expiresAt: expiresAt.toISOString() }
}

/**
 * Redeems a ticket for `path`: deleted whatever the outcome (single use), valid only for that path,
 * before it expires, while the token that issued it is live and its user enabled.
 */
export async function redeemStreamTicket(
  db: Executor,
  ticket: string,
  path: string,
): Promise<{ user: User; tokenId: string } | undefined> {
  const row = await kysely(db)
    .deleteFrom('stream_tickets')
    .where('ticket_hash', '=', hashTicket(ticket))
    .returningAll()
    .executeTakeFirst()
  if (!row || row.path !== path || row.expires_at.getTime() <= Date.now()) return undefined
  const token = await kysely(db)
    .selectFrom('api_tokens')
    .innerJoin('users', 'users.id', 'api_tokens.user_id')
    .select(['api_tokens.id', 'api_tokens.user_id'])
    .where('api_tokens.id', '=', row.token_id)
    .where('api_tokens.revoked_at', 'is', null)
    .where('users.disabled_at', 'is', null)
    .executeTakeFirst()
  if (!token) return undefined
  const user = await getUser(db, token.user_id)
  return user && { user, tokenId: token.id }
}
