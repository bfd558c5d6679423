import { Accounts, RequestError, type Store } from '../store/index.js'
import { all, type UserAdmin } from './admin-client.js'

/** Directly on the database (the server is stopped, or on Postgres). */
export function storeUserAdmin(store: Store): UserAdmin {
  const accounts = new Accounts(store)
  return {
    createUser: (name, tokenName) => refused(accounts.createUser(name, tokenName), 'name_taken' as const),
    listUsers: () => all((after) => accounts.listUsers({ limit: 200, ...(after && { after }) })),
    findUser: (idOrName) => accounts.findUser(idOrName),
    setDisabled: (userId, disabled) => refused(accounts.setDisabled(userId, disabled), undefined),
    createToken: (userId, name) => accounts.createToken(userId, name),
    listTokens: (userId) => all((after) => accounts.listTokens(userId, { limit: 200, ...(after && { after }) })),
    revokeToken: async (tokenId) => {
      const token = await refused(accounts.revokeToken(tokenId), undefined)
      return token && { id: token.id, prefix: token.prefix }
    },
  }
}

/** What a refused request stands for here (a name taken, nothing found); other errors go on. */
async function refused<T, R>(pending: Promise<T>, answer: R): Promise<T | R> {
  try {
    return await pending
  } catch (error) {
    if (error instanceof RequestError && (error.code === 'name_taken' || error.code === 'not_found')) return answer
    throw error
  }
}
