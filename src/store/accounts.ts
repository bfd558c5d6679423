import type { Store } from './open-store.js'
import type { Page, PageRequest } from './page.js'
import { issueStreamTicket, redeemStreamTicket } from './stream-ticket-repository.js'
import { RequestError, notFoundError } from './store-errors.js'
import { setUserBudget, type PeriodBudget } from './budget-repository.js'
import { announceAccessChange } from './access-signals.js'
import { isId } from './ids.js'
import {
  authenticateToken,
  createToken,
  createUser,
  findUser,
  getToken,
  getUser,
  isTokenLive,
  listTokens,
  listUsers,
  revokeToken,
  setUserDisabled,
  touchToken,
  type ApiToken,
  type IssuedToken,
  type User,
} from './user-repository.js'

/**
 * Users, their tokens and stream tickets: what the admin API and `plinth users|tokens` do. Taking
 * access away is announced to every instance, and answers only once this instance has heard the
 * announcement back (the database has then signalled every listening instance), so the token or user
 * stops working on its next request wherever it goes.
 */
export class Accounts {
  readonly #store: Store

  constructor(store: Store) {
    this.#store = store
  }

  /** A user and their first token, together. */
  async createUser(name: string, tokenName = 'default'): Promise<{ user: User; token: IssuedToken }> {
    // Users are named by id or name alike (the CLI, sharing): a name shaped like an id could pass for another user.
    if (isId(name)) {
      const message = 'looks like an id; a user name must not (users are named by id or name alike)'
      throw new RequestError('validation_failed', `the name ${JSON.stringify(name)} ${message}`, [
        { path: 'body.name', message },
      ])
    }
    checkUserName(name, 'body.name')
    checkTokenName(tokenName, 'body.tokenName')
    return this.#store.transaction(async (tx) => {
      const user = await createUser(tx, name)
      if ('error' in user) throw new RequestError('name_taken', `a user named ${JSON.stringify(user.taken)} exists`)
      return { user, token: await createToken(tx, user.id, tokenName) }
    })
  }

  listUsers(page: PageRequest): Promise<Page<User>> {
    return listUsers(this.#store, page)
  }

  async user(id: string): Promise<User> {
    const user = await getUser(this.#store, id)
    if (!user) throw notFoundError('user')
    return user
  }

  /** By id or by name. */
  findUser(idOrName: string): Promise<User | undefined> {
    return findUser(this.#store, idOrName)
  }

  /** Sets (null: removes) what the user's model calls may spend per day and month. */
  async setBudget(id: string, budget: PeriodBudget | null): Promise<User> {
    // The user is cached with their token (GET /api/me shows the budget): every instance drops it.
    const found = await this.#store.transaction(async (tx) => {
      if (!(await setUserBudget(tx, id, budget))) return false
      await announceAccessChange(tx, [`user:${id}`])
      return true
    })
    if (!found) throw notFoundError('user')
    this.#store.access.deliver(`user:${id}`)
    return this.user(id)
  }

  async setDisabled(id: string, disabled: boolean): Promise<User> {
    const echoed = disabled ? this.#store.access.echo(`user:${id}`) : undefined
    const user = await setUserDisabled(this.#store, id, disabled)
    if (!user) throw notFoundError('user')
    if (echoed) {
      // Here at once, everywhere else by the time this answers.
      this.#store.access.deliver(`user:${user.id}`)
      await echoed()
    }
    return user
  }

  async createToken(userId: string, name = 'default'): Promise<IssuedToken> {
    checkTokenName(name, 'body.name')
    await this.user(userId)
    return createToken(this.#store, userId, name)
  }

  async listTokens(userId: string, page: PageRequest): Promise<Page<ApiToken>> {
    await this.user(userId)
    return listTokens(this.#store, userId, page)
  }

  /** Revokes a token (revoking twice keeps the first time). */
  async revokeToken(id: string): Promise<ApiToken> {
    if (!(await getToken(this.#store, id))) throw notFoundError('token')
    const echoed = this.#store.access.echo(`token:${id}`)
    const token = await revokeToken(this.#store, id)
    this.#store.access.deliver(`token:${id}`)
    await echoed()
    if (!token) throw notFoundError('token')
    return token
  }

  /** A single-use ticket that opens one event stream at `path` as the token's user. */
  issueStreamTicket(tokenId: string, path: string, ttlMs: number): Promise<{ ticket: string; expiresAt: string }> {
    return issueStreamTicket(this.#store, tokenId, path, ttlMs)
  }

  /** Redeems a stream ticket (once, for its path, before it expires). */
  redeemStreamTicket(ticket: string, path: string): Promise<{ user: User; tokenId: string } | undefined> {
    return redeemStreamTicket(this.#store, ticket, path)
  }

  /** The live token's user (enabled); `undefined` for an unknown, revoked or disabled one. */
  authenticate(token: string): Promise<{ user: User; tokenId: string } | undefined> {
    return authenticateToken(this.#store, token)
  }

  /** Whether a token (by id) is live and its user enabled: what an open stream re-checks. */
  isTokenLive(tokenId: string): Promise<boolean> {
    return isTokenLive(this.#store, tokenId)
  }

  /** Records a token's use. */
  touchToken(tokenId: string): Promise<void> {
    return touchToken(this.#store, tokenId)
  }
}

/** A token's name as the admin API takes it (1–100 characters), the same offline (the CLI on the database). */
/**
 * The admin API's rule for user names, here too for `plinth users create` without a server: 1 to 100
 * characters, no space at either end, no control characters (a name is printed in lists and logs).
 */
function checkUserName(name: string, path: string): void {
  const length = [...name].length
  // eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
  if (length >= 1 && length <= 100 && /^\S(.*\S)?$/u.test(name) && !/[\u0000-\u001f\u007f-\u009f]/.test(name)) return
  const message = 'a user name has 1 to 100 characters, no space at either end and no control characters'
  throw new RequestError('validation_failed', message, [{ path, message }])
}

function checkTokenName(name: string, path: string): void {
  const length = [...name].length
  if (length >= 1 && length <= 100) return
  const message = 'a token name has 1 to 100 characters'
  throw new RequestError('validation_failed', `${path}: ${message}`, [{ path, message }])
}
