import { parseArgs } from 'node:util'
import { openStore, StoreError, type Store } from '../store/index.js'
import { SingleBar, Presets } from 'cli-progress'
import { verifyAuditChain } from '../cmdbus/index.js'
import { createEmbedder, reembedAll } from '../rag/index.js'
import { ConfigError, loadConfig, type PlinthConfig } from './config.js'
import { configSecrets, createLogger } from './logger.js'
import { startServer } from './start-server.js'
import { announceServer, httpUserAdmin, runningServer, storeUserAdmin, type UserAdmin } from './user-admin.js'
import { version } from './version.js'
import { ChatSession } from '../chat/index.js'

const usage = `plinth ${version} — headless HTTP + SSE agent server

Usage:
  plinth [serve] [--strict-plugins]    start the server (config: env + plinth.config.json);
                                       --strict-plugins: a plugin that cannot load stops it
  plinth migrate                       apply pending database migrations
  plinth users create <name> [--json] [--token-name N]
                                       create a user; the token is the last line of output
  plinth users list [--json]
  plinth users disable|enable <user>   <user> is an id or a name
  plinth tokens create <user> [--name N] [--json]
  plinth tokens list <user> [--json]
  plinth tokens revoke <token-id>
  plinth audit verify                  check the audit log's hash chain (exit 1 naming the first bad entry)
  plinth knowledge reembed             re-embed all knowledge with the configured embedder (after changing it)
  plinth chat [--url U] [--token T] [--project ID] [--conversation ID] [--once "question"]
                                       a terminal client of a running server (PLINTH_URL, PLINTH_TOKEN);
                                       proposed commands run here after you approve them
                                       (--command-timeout seconds, default 60; output capped at 64 KiB)
  plinth help | --version
`

/** Output sink, so tests can run commands in-process. */
interface Io {
  out(line: string): void
  err(line: string): void
}

const processIo: Io = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
}

/** Runs one CLI invocation; resolves to the exit code (serve resolves only on failure). */
export async function runCli(argv: string[], io: Io = processIo): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        json: { type: 'boolean', default: false },
        name: { type: 'string' },
        'token-name': { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
        version: { type: 'boolean', default: false },
        'strict-plugins': { type: 'boolean', default: false },
        url: { type: 'string' },
        token: { type: 'string' },
        project: { type: 'string' },
        conversation: { type: 'string' },
        once: { type: 'string' },
        'command-timeout': { type: 'string' },
      },
    })
  } catch (error) {
    io.err(`${(error as Error).message}\n\n${usage}`)
    return 2
  }
  const { values, positionals } = parsed
  if (values.version) {
    io.out(version)
    return 0
  }
  const [command = 'serve', sub, arg] = positionals
  if (values.help || command === 'help') {
    io.out(usage)
    return 0
  }
  // A client: it needs no server configuration (nor a database).
  if (command === 'chat') return chat(values, io)
  try {
    const config = loadConfig()
    if (values['strict-plugins']) config.strictPlugins = true
    switch (command) {
      case 'serve':
        return await serve(config, io)
      case 'migrate':
        return await withStore(config, async (store) => {
          const applied = store.migrations.applied
          io.out(applied.length > 0 ? `applied ${applied.join(', ')}` : 'database is up to date')
          return 0
        })
      case 'users':
        return await usersCommand(config, sub, arg, values, io)
      case 'tokens':
        return await tokensCommand(config, sub, arg, values, io)
      case 'audit':
        if (sub !== 'verify') {
          io.err(usage)
          return 2
        }
        return await withStore(config, async (store) => {
          const verdict = await verifyAuditChain(store)
          if (verdict.ok) {
            io.out(`audit chain intact: ${verdict.checked} entries verified`)
            return 0
          }
          io.err(`audit chain broken at entry ${verdict.firstBad?.id}: ${verdict.firstBad?.reason} (${verdict.checked} entries before it verified)`)
          return 1
        })
      case 'knowledge':
        if (sub !== 'reembed') {
          io.err(usage)
          return 2
        }
        return await withStore(config, (store) => reembed(store, config, io))
      default:
        io.err(`unknown command: ${command}\n\n${usage}`)
        return 2
    }
  } catch (error) {
    if (error instanceof ConfigError) {
      io.err(error.message)
      return 2
    }
    if (error instanceof StoreError) {
      io.err(`plinth: ${error.message}`)
      return 1
    }
    io.err(`plinth: ${(error as Error).message}`)
    return 1
  }
}

async function serve(config: PlinthConfig, io: Io): Promise<number> {
  const logger = createLogger(config.logLevel, undefined, configSecrets(config))
  // Handlers first: a signal that arrives while the server is still starting stops it once it is up.
  let stopRequested: string | undefined
  let stop = (signal: string): void => {
    stopRequested ??= signal
  }
  process.once('SIGTERM', () => stop('SIGTERM'))
  process.once('SIGINT', () => stop('SIGINT'))
  const server = await startServer(config, logger)
  // Once, on the terminal too: easy to miss in a stream of JSON logs.
  for (const warning of server.warnings) io.err(`plinth: WARNING: ${warning}`)
  await createFirstUser(server.store, io)
  // The CLI beside a server that holds the embedded database finds it here (see withUserAdmin).
  const unannounce = server.store.engine === 'pglite' ? await announceServer(config.dataDir, { pid: process.pid, url: server.url }) : async () => undefined
  stop = (signal: string): void => {
    logger.info({ signal }, 'shutting down')
    const force = setTimeout(() => process.exit(1), 10_000)
    force.unref()
    void unannounce()
    server.close().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed')
        process.exit(1)
      },
    )
  }
  if (stopRequested) stop(stopRequested)
  return new Promise<number>(() => undefined)
}

/**
 * On a database without users (a first start), creates the first user and prints its token once —
 * on the terminal, never through the logger — so the quickstart works in the order written.
 */
async function createFirstUser(store: Store, io: Io): Promise<void> {
  const existing = await store.db.selectFrom('users').select('id').limit(1).execute()
  if (existing.length > 0) return
  const issued = await storeUserAdmin(store).createUser('admin', 'first start')
  if (issued === 'name_taken') return
  io.out(`plinth: no users yet — created the first user "admin" (${issued.user.id}). Its token, shown once (store it now):`)
  io.out(issued.token.token)
}

/** Re-embeds every chunk with the configured embedder, showing progress (a bar on a terminal). */
async function reembed(store: Store, config: PlinthConfig, io: Io): Promise<number> {
  const embedder = createEmbedder(config.embeddings)
  const bar = io === processIo && process.stderr.isTTY ? new SingleBar({ format: 're-embedding [{bar}] {percentage}% {value}/{total} chunks', stream: process.stderr }, Presets.shades_classic) : null
  let reported = -1
  const done = await reembedAll(store, embedder, (count, total) => {
    if (bar) {
      if (count === 0) bar.start(total, 0)
      else bar.update(count)
      return
    }
    // Without a terminal: a line at every tenth.
    const tenth = total === 0 ? 10 : Math.floor((count / total) * 10)
    if (tenth > reported) {
      reported = tenth
      io.err(`re-embedding: ${count}/${chunks(total)}`)
    }
  })
  bar?.stop()
  io.out(`re-embedded ${chunks(done)} with ${embedder.id}`)
  return 0
}

/** "1 chunk", "2 chunks". */
function chunks(count: number): string {
  return `${count} ${count === 1 ? 'chunk' : 'chunks'}`
}

async function withStore<T>(config: PlinthConfig, fn: (store: Store) => Promise<T>): Promise<T> {
  const store = await openStore({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, pgliteSharedBuffers: config.pgliteSharedBuffers, prepareStatements: config.pgPrepare })
  try {
    return await fn(store)
  } finally {
    await store.close()
  }
}

type Flags = { json?: boolean; name?: string; 'token-name'?: string }

/**
 * Runs a user/token command on the database — or, while a server holds the embedded database, through
 * that server's admin API when PLINTH_ADMIN_TOKEN is set (else the lock error says how).
 */
async function withUserAdmin(config: PlinthConfig, io: Io, fn: (admin: UserAdmin) => Promise<number>): Promise<number> {
  let store: Store
  try {
    store = await openStore({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, pgliteSharedBuffers: config.pgliteSharedBuffers, prepareStatements: config.pgPrepare })
  } catch (error) {
    if (!(error instanceof StoreError) || error.code !== 'data_dir_locked') throw error
    const server = await runningServer(config.dataDir)
    if (!server) throw error
    if (!config.adminToken) {
      throw new StoreError('data_dir_locked', `${error.message}. The server at ${server.url} holds it: set PLINTH_ADMIN_TOKEN (the server's) and this command goes through its admin API`)
    }
    io.err(`(the server at ${server.url} holds the database: using its admin API)`)
    return fn(httpUserAdmin(server.url, config.adminToken))
  }
  try {
    return await fn(storeUserAdmin(store))
  } finally {
    await store.close()
  }
}

async function usersCommand(config: PlinthConfig, sub: string | undefined, arg: string | undefined, flags: Flags, io: Io): Promise<number> {
  if (sub === 'create' && arg) {
    return withUserAdmin(config, io, async (admin) => {
      const issued = await admin.createUser(arg, flags['token-name'] ?? 'default')
      if (issued === 'name_taken') {
        io.err(`plinth: a user named ${JSON.stringify(arg)} already exists`)
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
  io.err(usage)
  return 2
}

async function tokensCommand(config: PlinthConfig, sub: string | undefined, arg: string | undefined, flags: Flags, io: Io): Promise<number> {
  if (!arg || !['create', 'list', 'revoke'].includes(sub ?? '')) {
    io.err(usage)
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
        io.out(`${token.id}  ${token.name}  ${token.prefix}…  created ${token.createdAt}${token.revokedAt ? `  revoked ${token.revokedAt}` : ''}`)
      }
    }
    return 0
  })
}

async function chat(
  values: { url?: string; token?: string; project?: string; conversation?: string; once?: string; 'command-timeout'?: string },
  io: Io,
): Promise<number> {
  const token = values.token ?? process.env.PLINTH_TOKEN
  if (!token) {
    io.err('plinth chat needs a token: --token or PLINTH_TOKEN (plinth users create <name> prints one)')
    return 2
  }
  const timeout = Number(values['command-timeout'] ?? 60)
  if (!Number.isFinite(timeout) || timeout <= 0) {
    io.err('--command-timeout must be a positive number of seconds')
    return 2
  }
  const session = new ChatSession({
    url: values.url ?? process.env.PLINTH_URL ?? `http://127.0.0.1:${process.env.PORT ?? 8080}`,
    token,
    ...(values.project && { project: values.project }),
    ...(values.conversation && { conversation: values.conversation }),
    ...(values.once !== undefined && { once: values.once }),
    commandTimeoutMs: timeout * 1000,
    outputMaxBytes: 64 * 1024,
    input: process.stdin,
    output: process.stdout,
    errorOutput: process.stderr,
  })
  return session.run()
}
