import type { Store } from '../store/index.js'
import {
  AdminApiUnusable,
  httpAuditVerify,
  httpUserAdmin,
  runningServerOn,
  type AuditVerdict,
  type UserAdmin,
} from './admin-client.js'
import type { Io } from './cli-io.js'
import type { PlinthConfig } from './config.js'

// `plinth users|tokens|audit`: on the database, or through the admin API of the server beside the CLI.
// Then nothing of the database code is loaded: an answer in about a tenth of a second rather than half a
// second of loading kysely and pg (docs/reference/benchmarks.md#start-and-cli-latency).

type Flags = { json?: boolean; name?: string; 'token-name'?: string }
type Usage = () => string

/**
 * Runs a command through the admin API of the server announced in the data directory when
 * PLINTH_ADMIN_TOKEN is set, else on the database. The embedded database is locked while a server holds
 * it (the lock error says how to proceed); on Postgres a server that does not answer or refuses the
 * token is passed by for the database itself.
 */
async function withAdmin(
  config: PlinthConfig,
  io: Io,
  viaStore: (store: Store) => Promise<number>,
  viaServer: (url: string, adminToken: string) => Promise<number>,
): Promise<number> {
  if (config.adminToken) {
    const server = await runningServerOn(config.dataDir, config.databaseUrl)
    if (server && !config.databaseUrl) {
      io.err(`(the server at ${server.url} holds the database: using its admin API)`)
      return viaServer(server.url, config.adminToken)
    }
    if (server) {
      try {
        const status = await viaServer(server.url, config.adminToken)
        io.err(`(through the admin API of the server at ${server.url})`)
        return status
      } catch (error) {
        if (!(error instanceof AdminApiUnusable)) throw error
        io.err(`(${error.message}: using the database)`)
      }
    }
  }
  const { openStore, StoreError } = await import('../store/index.js')
  let store: Store
  try {
    store = await openStore({
      databaseUrl: config.databaseUrl,
      dataDir: config.dataDir,
      pgliteSharedBuffers: config.pgliteSharedBuffers,
      prepareStatements: config.pgPrepare,
    })
  } catch (error) {
    if (!(error instanceof StoreError) || error.code !== 'data_dir_locked') throw error
    const server = await runningServerOn(config.dataDir, config.databaseUrl)
    if (!server) throw error
    if (!config.adminToken) {
      throw new StoreError(
        'data_dir_locked',
        `${error.message}. The server at ${server.url} holds it: set PLINTH_ADMIN_TOKEN (the server's) and this command goes through its admin API`,
      )
    }
    io.err(`(the server at ${server.url} holds the database: using its admin API)`)
    return viaServer(server.url, config.adminToken)
  }
  try {
    return await viaStore(store)
  } finally {
    await store.close()
  }
}

async function withUserAdmin(config: PlinthConfig, io: Io, fn: (admin: UserAdmin) => Promise<number>): Promise<number> {
  return withAdmin(
    config,
    io,
    async (store) => fn((await import('./user-admin.js')).storeUserAdmin(store)),
    (url, adminToken) => fn(httpUserAdmin(url, adminToken)),
  )
}

/** `plinth audit verify`: the same verdict offline or from the running server. */
export async function auditVerifyCommand(config: PlinthConfig, io: Io): Promise<number> {
  const report = (verdict: AuditVerdict): number => {
    const from = verdict.checkpoint
      ? ` from the retention checkpoint after entry ${verdict.checkpoint.throughId} (${verdict.checkpoint.createdAt})`
      : ''
    if (verdict.ok) {
      io.out(`audit chain intact: ${verdict.checked} entries verified${from}`)
      return 0
    }
    io.err(
      `audit chain broken at entry ${verdict.firstBad?.id}: ${verdict.firstBad?.reason} (${verdict.checked} entries before it verified)`,
    )
    return 1
  }
  return withAdmin(
    config,
    io,
    async (store) =>
      report(
        await (
          await import('../cmdbus/index.js')
        ).verifyAuditChain(store, { ...(config.secretKey && { secretKey: config.secretKey }) }),
      ),
    async (url, adminToken) => report(await httpAuditVerify(url, adminToken)),
  )
}

export async function usersCommand(
  config: PlinthConfig,
  sub: string | undefined,
  arg: string | undefined,
  flags: Flags,
  io: Io,
  usage: Usage,
): Promise<number> {
  if (sub === 'create' && arg) {
    return withUserAdmin(config, io, async (admin) => {
      const issued = await admin.createUser(arg, flags['token-name'] ?? 'default')
      if (issued === 'name_taken') {
        io.err(`plinth: a user named ${JSON.stringify(arg)} already exists (names are compared regardless of case)`)
        return 1
      }
      if (flags.json) io.out(JSON.stringify({ userId: issued.user.id, token: issued.token.token }))
      else {
        io.out(`created user ${issued.user.name} (${issued.user.id})`)
        io.out('token (shown once, store it now):')
        io.out(issued.token.token)
      }
      return 0
    })
  }
  if (sub === 'list') {
    return withUserAdmin(config, io, async (admin) => {
      const users = await admin.listUsers()
      if (flags.json) io.out(JSON.stringify(users))
      else for (const user of users) io.out(`${user.id}  ${user.name}${user.disabled ? '  (disabled)' : ''}`)
      return 0
    })
  }
  if ((sub === 'disable' || sub === 'enable') && arg) {
    return withUserAdmin(config, io, async (admin) => {
      const user = await admin.findUser(arg)
      if (!user) {
        io.err(`plinth: no user ${JSON.stringify(arg)}`)
        return 1
      }
      await admin.setDisabled(user.id, sub === 'disable')
      io.out(`${sub}d user ${user.name} (${user.id})`)
      return 0
    })
  }
  io.err(`${missingArgument('users', sub, arg)}${usage()}`)
  return 2
}

/** What a `users`/`tokens` call lacks, said before the usage text. */
function missingArgument(command: string, sub: string | undefined, arg: string | undefined): string {
  if (sub === undefined) return `plinth ${command}: missing a subcommand\n\n`
  // An empty argument ('') is as missing as none.
  if (arg === undefined || arg === '')
    return `plinth ${command} ${sub}: missing ${command === 'users' && sub === 'create' ? '<name>' : 'its argument'}\n\n`
  return `plinth ${command}: unknown subcommand ${JSON.stringify(sub)}\n\n`
}

export async function tokensCommand(
  config: PlinthConfig,
  sub: string | undefined,
  arg: string | undefined,
  flags: Flags,
  io: Io,
  usage: Usage,
): Promise<number> {
  if (!arg || !['create', 'list', 'revoke'].includes(sub ?? '')) {
    io.err(`${missingArgument('tokens', sub, arg)}${usage()}`)
    return 2
  }
  return withUserAdmin(config, io, async (admin) => {
    if (sub === 'revoke') {
      const token = await admin.revokeToken(arg)
      if (!token) {
        io.err(`plinth: no token ${JSON.stringify(arg)}`)
        return 1
      }
      io.out(`revoked token ${token.id}${token.prefix ? ` (${token.prefix}…)` : ''}`)
      return 0
    }
    const user = await admin.findUser(arg)
    if (!user) {
      io.err(`plinth: no user ${JSON.stringify(arg)}`)
      return 1
    }
    if (sub === 'create') {
      const issued = await admin.createToken(user.id, flags.name ?? 'default')
      if (flags.json) io.out(JSON.stringify({ userId: user.id, tokenId: issued.id, token: issued.token }))
      else {
        io.out(`created token ${issued.id} for ${user.name} (shown once, store it now):`)
        io.out(issued.token)
      }
      return 0
    }
    const tokens = await admin.listTokens(user.id)
    if (flags.json) io.out(JSON.stringify(tokens))
    else {
      for (const token of tokens) {
        io.out(
          `${token.id}  ${token.name}  ${token.prefix}…  created ${token.createdAt}${token.revokedAt ? `  revoked ${token.revokedAt}` : ''}`,
        )
      }
    }
    return 0
  })
}
