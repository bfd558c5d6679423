import { SingleBar, Presets } from 'cli-progress'
import { countAllMemories, hasUsers, openStore, type Store } from '../store/index.js'
import { createEmbedder, reembedAll } from '../rag/index.js'
import { announceServer, databaseIdentity } from './admin-client.js'
import { releaseYoungGeneration } from './young-generation.js'
import type { PlinthConfig } from './config.js'
import { processIo, type Io } from './cli-io.js'
import { configSecrets, createLogger } from './logger.js'
import { startServer } from './start-server.js'
import { storeUserAdmin } from './user-admin.js'

// The CLI commands that hold the database or run the server (loaded only for them).

export async function serve(config: PlinthConfig, io: Io): Promise<number> {
  const logger = createLogger(config.logLevel, undefined, configSecrets(config))
  // Handlers first: a signal that arrives while the server is still starting stops it once it is up.
  let stopRequested: string | undefined
  let stop = (signal: string): void => {
    stopRequested ??= signal
  }
  process.once('SIGTERM', () => stop('SIGTERM'))
  process.once('SIGINT', () => stop('SIGINT'))
  // A log reader that went away (`| head`, a shipper restarting) must not take the server down with it.
  for (const stream of [process.stdout, process.stderr]) stream.on('error', ignoreBrokenPipe)
  const server = await startServer(config, logger)
  // Once, on the terminal too: easy to miss in a stream of JSON logs.
  for (const warning of server.warnings) io.err(`plinth: WARNING: ${warning}`)
  await createFirstUser(server.store, io)
  // The CLI beside the server finds it here and uses its admin API (see cli-admin-commands.ts). On
  // Postgres only with an admin API: otherwise nothing of the data directory is created.
  const unannounce =
    server.store.engine === 'pglite' || config.adminToken
      ? await announceServer(config.dataDir, {
          pid: process.pid,
          url: server.url,
          ...(databaseIdentity(config.databaseUrl) !== undefined && { database: databaseIdentity(config.databaseUrl) }),
        })
      : async () => undefined
  stop = (signal: string): void => {
    logger.info({ signal }, 'shutting down')
    // Tool calls get the grace, then are aborted and recorded: the last resort comes well after that.
    const force = setTimeout(() => process.exit(1), config.shutdownGraceMs + 10_000)
    force.unref()
    // Awaited before exiting: a server.json left behind names a pid the OS may give another process.
    const unannounced = unannounce().catch(() => undefined)
    server.close().then(
      async () => {
        await unannounced
        process.exit(0)
      },
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed')
        process.exit(1)
      },
    )
  }
  if (stopRequested) stop(stopRequested)
  releaseYoungGeneration()
  return new Promise<number>(() => undefined)
}

function ignoreBrokenPipe(error: NodeJS.ErrnoException): void {
  if (error.code !== 'EPIPE') throw error
}

/**
 * On a database without users (a first start), creates the first user and prints its token once —
 * on the terminal, never through the logger — so the quickstart works in the order written.
 */
async function createFirstUser(store: Store, io: Io): Promise<void> {
  if (await hasUsers(store)) return
  const issued = await storeUserAdmin(store).createUser('admin', 'first start')
  if (issued === 'name_taken') return
  io.out(
    `plinth: no users yet — created the first user "admin" (${issued.user.id}). Its token, shown once (store it now):`,
  )
  io.out(issued.token.token)
}

/** Re-embeds every chunk and memory with the configured embedder, showing progress (a bar on a terminal). */
export async function reembed(store: Store, config: PlinthConfig, io: Io): Promise<number> {
  const embedder = createEmbedder(config.embeddings)
  const memories = await countAllMemories(store)
  const bar =
    io === processIo && process.stderr.isTTY
      ? new SingleBar(
          { format: 're-embedding [{bar}] {percentage}% {value}/{total} chunks', stream: process.stderr },
          Presets.shades_classic,
        )
      : null
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
  const memoryText = memories > 0 ? ` and ${memories} memor${memories === 1 ? 'y' : 'ies'}` : ''
  io.out(`re-embedded ${chunks(done - memories)}${memoryText} with ${embedder.id}`)
  return 0
}

export async function withStore<T>(config: PlinthConfig, fn: (store: Store) => Promise<T>): Promise<T> {
  const store = await openStore({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    pgliteSharedBuffers: config.pgliteSharedBuffers,
    prepareStatements: config.pgPrepare,
  })
  try {
    return await fn(store)
  } finally {
    await store.close()
  }
}

/** "1 chunk", "2 chunks". */
function chunks(count: number): string {
  return `${count} chunk${count === 1 ? '' : 's'}`
}
