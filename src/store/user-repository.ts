import { createHash, randomBytes } from 'node:crypto'
import { sql, type RawBuilder } from 'kysely'
import { announceAccessChange } from './access-signals.js'
import { newId } from './ids.js'
import { toPage, type Page, type PageRequest } from './page.js'
import { kysely, type Executor } from './executor.js'
import { periodBudget, type PeriodBudget } from './budget-repository.js'

export interface User {
  id: string
  name: string
  disabled: boolean
  /** What the user's model calls may spend per day and month, on every project (set by the operator). */
  budget: PeriodBudget | null
  createdAt: string
}

export interface ApiToken {
  id: string
  userId: string
  name: string
  /** The first characters of the secret, to tell tokens apart in lists. */
  prefix: string
  createdAt: string
  lastUsedAt: string | null
  revokedAt: string | null
}

export interface IssuedToken extends ApiToken {
  /** The secret, shown once; only its sha256 is stored. */
  token: string
}

const tokenPrefix = 'plt_'

/** sha256 of a token, hex: what is stored and looked up. */
export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex')
}

/** A new user; refused when a user's name is the same but for case (`taken`: theirs). */
export async function createUser(db: Executor, name: string): Promise<User | { error: 'name_taken'; taken: string }> {
  const clash = await kysely(db)
    .selectFrom('users')
    .select('name')
    .where(sql<string>`lower(name)`, '=', sql<string>`lower(${name})`)
    .executeTakeFirst()
  if (clash) return { error: 'name_taken', taken: clash.name }
  const row = await kysely(db)
    .insertInto('users')
    .values({ id: newId(), name })
    // The unique index is on lower(name): a request racing this one for the same name but for case loses.
    .onConflict((conflict) => conflict.doNothing())
    .returningAll()
    .executeTakeFirst()
  return row ? toUser(row) : { error: 'name_taken', taken: name }
}

export async function getUser(db: Executor, id: string): Promise<User | undefined> {
  const row = await kysely(db).selectFrom('users').selectAll().where('id', '=', id).executeTakeFirst()
  return row && toUser(row)
}

/**
 * Whether `name` (as given) matches a user's name regardless of case, and is safe to take so: not the
 * name a user had before migration 0041 appended its id (`Dup (01K…)`) because an older user's name
 * differed only in case. Taken regardless of case, the old name would now name that older user: a
 * designated approver, or the user a CLI command acts on, would silently become another person.
 */
function sameNameButCase(name: RawBuilder<string>) {
  return sql<boolean>`(lower(users.name) = lower(${name})
    and not exists (select 1 from users renamed where renamed.name = ${name} || ' (' || renamed.id || ')'))`
}

/**
 * A user by id or, failing that, by name (the CLI accepts either), regardless of case as names are
 * unique regardless of case (`sameNameButCase`).
 */
export async function findUser(db: Executor, idOrName: string): Promise<User | undefined> {
  const row = await kysely(db)
    .selectFrom('users')
    .selectAll()
    // lower() on both sides in SQL (as createUser compares): JavaScript's lower case differs for some letters.
    .where((eb) =>
      eb.or([eb('id', '=', idOrName), eb('name', '=', idOrName), sameNameButCase(sql<string>`${idOrName}::text`)]),
    )
    // The id first: names shaped like ids are refused now, but one may predate that. Then the exact
    // name: two names the same but for case may predate their uniqueness.
    .orderBy(sql`id = ${idOrName}`, 'desc')
    .orderBy(sql`name = ${idOrName}`, 'desc')
    .orderBy('id')
    .executeTakeFirst()
  return row && toUser(row)
}

/** Whether the database holds any user at all (a first start has none). */
export async function hasUsers(db: Executor): Promise<boolean> {
  const existing = await kysely(db).selectFrom('users').select('id').limit(1).execute()
  return existing.length > 0
}

/** The ids of the active users named (by id, or name regardless of case: `sameNameButCase`) in `names`. */
export async function activeUserIds(db: Executor, names: readonly string[]): Promise<string[]> {
  const rows = await kysely(db)
    .selectFrom('users')
    .select('id')
    .where((eb) =>
      eb.or([
        eb('name', 'in', [...names]),
        eb('id', 'in', [...names]),
        sql<boolean>`exists (select 1 from unnest(${[...names]}::text[]) as n (name) where ${sameNameButCase(sql<string>`n.name`)})`,
      ]),
    )
    .where('disabled_at', 'is', null)
    .execute()
  return rows.map((row) => row.id)
}

/** How many users may sign in (not disabled). */
export async function countActiveUsers(db: Executor): Promise<number> {
  const row = await kysely(db)
    .selectFrom('users')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('disabled_at', 'is', null)
    .executeTakeFirstOrThrow()
  return Number(row.count)
}

export async function listUsers(db: Executor, page: PageRequest): Promise<Page<User>> {
  let query = kysely(db)
    .selectFrom('users')
    .selectAll()
    .orderBy('id')
    .limit(page.limit + 1)
  if (page.after) query = query.where('id', '>', page.after)
  return toPage((await query.execute()).map(toUser), page.limit)
}

export async function setUserDisabled(db: Executor, id: string, disabled: boolean): Promise<User | undefined> {
  const row = await kysely(db)
    .updateTable('users')
    .set({ disabled_at: disabled ? new Date() : null })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst()
  // Open streams of a disabled user end at once (on every instance).
  if (row && disabled) await announceAccessChange(db, [`user:${id}`])
  return row && toUser(row)
}

/** Issues a token: ≥ 32 random bytes, returned once, stored as sha256. */
export async function createToken(db: Executor, userId: string, name: string): Promise<IssuedToken> {
  const token = tokenPrefix + randomBytes(32).toString('base64url')
  const row = await kysely(db)
    .insertInto('api_tokens')
    .values({ id: newId(), user_id: userId, name, token_hash: hashToken(token), prefix: token.slice(0, 10) })
    .returningAll()
    .executeTakeFirstOrThrow()
  return { ...toToken(row), token }
}

export async function listTokens(db: Executor, userId: string, page: PageRequest): Promise<Page<ApiToken>> {
  let query = kysely(db)
    .selectFrom('api_tokens')
    .selectAll()
    .where('user_id', '=', userId)
    .orderBy('id')
    .limit(page.limit + 1)
  if (page.after) query = query.where('id', '>', page.after)
  return toPage((await query.execute()).map(toToken), page.limit)
}

export async function getToken(db: Executor, id: string): Promise<ApiToken | undefined> {
  const row = await kysely(db).selectFrom('api_tokens').selectAll().where('id', '=', id).executeTakeFirst()
  return row && toToken(row)
}

/** Revokes a token; revoking twice keeps the first time. Streams opened with it end at once. */
export async function revokeToken(db: Executor, id: string): Promise<ApiToken | undefined> {
  await kysely(db)
    .updateTable('api_tokens')
    .set({ revoked_at: new Date() })
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .execute()
  await announceAccessChange(db, [`token:${id}`])
  return getToken(db, id)
}

/** Whether a token (by id) is live and its user enabled: what an open stream re-checks. */
export async function isTokenLive(db: Executor, tokenId: string): Promise<boolean> {
  const row = await kysely(db)
    .selectFrom('api_tokens')
    .innerJoin('users', 'users.id', 'api_tokens.user_id')
    .select('api_tokens.id')
    .where('api_tokens.id', '=', tokenId)
    .where('api_tokens.revoked_at', 'is', null)
    .where('users.disabled_at', 'is', null)
    .executeTakeFirst()
  return row !== undefined
}

/** The enabled user holding a live token, or undefined. */
export async function authenticateToken(
  db: Executor,
  token: string,
): Promise<{ user: User; tokenId: string } | undefined> {
  const row = await kysely(db)
    .selectFrom('api_tokens')
    .innerJoin('users', 'users.id', 'api_tokens.user_id')
    .select([
      'api_tokens.id as token_id',
      'users.id',
      'users.name',
      'users.disabled_at',
      'users.budget',
      'users.created_at',
    ])
    .where('api_tokens.token_hash', '=', hashToken(token))
    .where('api_tokens.revoked_at', 'is', null)
    .where('users.disabled_at', 'is', null)
    .executeTakeFirst()
  if (!row) return undefined
  return { user: toUser(row), tokenId: row.token_id }
}

export async function touchToken(db: Executor, id: string): Promise<void> {
  await kysely(db).updateTable('api_tokens').set({ last_used_at: new Date() }).where('id', '=', id).execute()
}

function toUser(row: { id: string; name: string; disabled_at: Date | null; budget: unknown; created_at: Date }): User {
  return {
    id: row.id,
    name: row.name,
    disabled: row.disabled_at !== null,
    budget: periodBudget(row.budget),
    createdAt: row.created_at.toISOString(),
  }
}

function toToken(row: {
  id: string
  user_id: string
  name: string
  prefix: string
  created_at: Date
  last_used_at: Date | null
  revoked_at: Date | null
}): ApiToken {
  return {
    id: row.id,
    userId: row.user_id,
    name: row.name,
    prefix: row.prefix,
    createdAt: row.created_at.toISOString(),
    lastUsedAt: row.last_used_at?.toISOString() ?? null,
    revokedAt: row.revoked_at?.toISOString() ?? null,
  }
}
