import { mkdir, rm, writeFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { join } from 'node:path'
import { Kysely, PostgresDialect, sql, type PostgresPool } from 'kysely'
import pg from 'pg'
import type { Database } from './database.js'
import { AccessSignals, accessChannel } from './access-signals.js'
import { RunSignals, runsChannel } from './run-signals.js'
import { EventFeed } from './event-feed.js'
import { SettingsSignals, settingsChannel } from './settings-repository.js'
import { WebhookSignals, webhooksChannel } from './webhook-outbox.js'
import { AppendLog, noteAppended, eventsChannel, type EventRecord, type NewEvent, type RunFence } from './event-log.js'
import { migrate, readMigrations, type MigrationResult } from './migrator.js'
import type { NewRun, Run, RunPatch } from './run-repository.js'
import { createRun, type CreateRunOptions, type CreatedRun } from './transitions/create-run.js'
import { runTransition, type TransitionFence, type TransitionReads, type TransitionWrite } from './run-transition.js'
import { lockDataDir, type LockWait } from './pglite/data-dir-lock.js'
import { PGlitePool } from './pglite/pglite-pool.js'
import { PGlitePreparedStatements } from './pglite/prepared-query.js'
import { unpackTemplate } from './pglite/template.js'
import { guardParameters, prepareRepeatedStatements } from './prepared-statements.js'
import { StoreError, isOneActiveRunViolation } from './store-errors.js'
import { executorOf, type Executor } from './executor.js'
import { WalFlush, walBarrier } from './wal-flush.js'
import { GroupedAppends, appendGrouped } from './grouped-appends.js'
import { GroupCommit } from './group-commit.js'
import { writeDispatchSteps, type DispatchStep } from './grouped-dispatch-steps.js'

export type Engine = 'pg' | 'pglite'

export interface StoreOptions {
  /** `postgres://…`: use a Postgres server. Otherwise PGlite in `dataDir` (or in memory). */
  databaseUrl?: string
  /** Where PGlite keeps its files (`<dataDir>/pg`). Ignored with `databaseUrl`. */
  dataDir?: string
  /** Start PGlite from this dump instead of a directory (tests clone a migrated template). */
  pgliteDump?: Blob
  /** Apply pending migrations (default true); when false, pending migrations are an error. */
  migrate?: boolean
  /** Maximum pg pool size (default 10). */
  poolSize?: number
  /** Prepare the statements each connection (PGlite: the session) repeats (default true). */
  prepareStatements?: boolean
  /** Postgres: commits wait for their WAL flush (default true; false: `synchronous_commit=off`). */
  synchronousCommit?: boolean
  /**
   * PGlite's shared buffers (default `16MB`). Postgres' own default (128MB) is what makes the embedded
   * database's memory: WASM memory never shrinks, so every buffer touched stays resident.
   */
  pgliteSharedBuffers?: string
  /** The migrated template a new PGlite data directory starts from (default: the one the build ships). */
  pgliteTemplate?: string
  /** PGlite: how long to wait for another process (a server still stopping) to let go of `dataDir`. */
  lockWait?: LockWait
}

/**
 * The database, its engine, and the live event feed. The store is itself the `Executor` repository
 * functions take outside a transaction (`getRun(store, id)`); inside one they take its `tx`.
 */
export interface Store extends Executor {
  readonly engine: Engine
  readonly feed: EventFeed
  /** Access changes (revoked tokens, disabled users, sharing) announced by any instance. */
  readonly access: AccessSignals
  /** Operator settings changed by any instance. */
  readonly settings: SettingsSignals
  /** Runs ended by an instance that does not drive them (their driver must stop). */
  readonly runs: RunSignals
  /** Webhook messages committed by any instance (the deliverers wake). */
  readonly webhooks: WebhookSignals
  readonly migrations: MigrationResult
  /** Runs `fn` in one transaction. */
  transaction<T>(fn: (tx: Executor) => Promise<T>): Promise<T>
  /**
   * Appends events that go with no other change, in one statement (its own transaction), which other
   * appends made meanwhile may share (`GroupedAppends`). With a fence, nothing is appended unless that
   * lease still holds the run.
   */
  appendEvents(events: NewEvent[], fence?: RunFence): Promise<EventRecord[]>
  /**
   * Creates a user message's run (`transitions/create-run.ts`): one statement, its own transaction, or
   * with `within` inside a transaction that `within` also writes in (e.g. an Idempotency-Key's record:
   * both or neither). Run again when a concurrent start in the same conversation won the race.
   */
  createRun(
    input: NewRun,
    options: CreateRunOptions & { within?: (tx: Executor, run: Run) => Promise<void> },
  ): Promise<CreatedRun>
  /**
   * Runs one statement (its own transaction) that appends events, tagged as this instance's; they
   * reach this instance's streams on return. With `deferFlush`, the statement may commit without
   * waiting for its WAL flush (`flushDeferred` in its result); the store then waits for that flush
   * before it answers (docs/guides/scaling.md#deferred-wal-flush).
   */
  /**
   * Writes a dispatch step that changes only the dispatch and the audit log; the steps of concurrent
   * dispatches share statements (`writeDispatchSteps`). False when nothing was written (a start's
   * idempotency key is taken). Answers once the step is on disk, as `statement` does.
   */
  dispatchStep(step: DispatchStep): Promise<boolean>
  statement<T extends { events: EventRecord[]; flushDeferred?: boolean }>(
    fn: (db: Executor, tag: string, deferFlush: boolean) => Promise<T>,
  ): Promise<T>
  /**
   * A run's state change in one statement under its lease (`runTransition`); its events reach this
   * instance's streams on return. `undefined` when the lease has passed (nothing was written).
   */
  transition(
    fence: TransitionFence,
    patch: RunPatch,
    writes: TransitionWrite[],
    events: NewEvent[],
    reads?: TransitionReads,
  ): Promise<{ run: Run; events: EventRecord[]; reads: { [name: string]: unknown } } | undefined>
  /** Throws when the database does not answer. */
  ping(): Promise<void>
  /**
   * For background work, before each statement: resolves when requests have left the database alone
   * for a moment, or after `maxWaitMs` (docs/guides/operating.md#storage). On the embedded database a
   * statement holds the server's only thread; on Postgres it resolves at once.
   */
  quiet(maxWaitMs: number): Promise<void>
  close(): Promise<void>
}

/** Opens the database named by the options, migrates it and starts the event feed. */
export async function openStore(options: StoreOptions): Promise<Store> {
  const connection = options.databaseUrl
    ? await connectPostgres(options.databaseUrl, options.poolSize ?? 10, {
        prepare: options.prepareStatements ?? true,
        synchronousCommit: options.synchronousCommit ?? true,
      })
    : await connectPGlite(options)
  try {
    const migrations = await prepareSchema(connection.pool, options.migrate ?? true)
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: connection.pool }) })
    const access = new AccessSignals()
    const settings = new SettingsSignals()
    const runs = new RunSignals()
    const webhooks = new WebhookSignals()
    // One listening connection carries every channel; it starts and stops with the feed.
    const root = executorOf(db)
    const feed = new EventFeed(root, (onEvents) =>
      connection.listen({
        [eventsChannel]: onEvents,
        [accessChannel]: (payload) => access.heard(payload),
        [settingsChannel]: (payload) => settings.deliver(payload),
        [runsChannel]: (payload) => runs.deliver(payload),
        [webhooksChannel]: () => webhooks.deliver(),
      }),
    )
    await feed.start()
    // Postgres with synchronous commit: audited statements let go of the chain before their flush.
    const walFlush =
      connection.engine === 'pg' && options.synchronousCommit !== false
        ? new WalFlush(() => walBarrier(root))
        : undefined
    const deferFlush = walFlush ? await walFlush.available() : false
    // Streamed deltas and outputs of concurrent runs share statements (group commit).
    const grouped = new GroupedAppends(
      (items) => appendGrouped(root, items, feed.tag),
      (events) => feed.deliverCommitted(events),
    )
    // And so do the audited steps of concurrent dispatches: one append to the audit chain, one commit
    // and one flush for all of them. Their commit waits for its flush: with one statement in flight,
    // a barrier after it would cost more than the flush it lets go of (docs/guides/scaling.md#deferred-wal-flush).
    const dispatchSteps = new GroupCommit<DispatchStep, boolean>((steps) => writeDispatchSteps(root, steps), {
      size: (step) => (step.kind === 'start' ? step.audits.length : 1),
      maxSize: 64,
    })
    const transaction = async <T>(fn: (tx: Executor) => Promise<T>): Promise<T> => {
      const log = new AppendLog(feed.tag)
      const result = await db.transaction().execute((tx) => fn(executorOf(log.install(tx))))
      if (log.events.length > 0) feed.deliverCommitted(log.events)
      return result
    }
    return {
      ...root,
      engine: connection.engine,
      feed,
      access,
      settings,
      runs,
      webhooks,
      migrations,
      transaction,
      appendEvents: (events, fence) => grouped.append(events, fence),
      createRun: async (input, options) => {
        const { within } = options
        for (let attempt = 1; ; attempt++) {
          try {
            if (!within) {
              const created = await createRun(root, input, options, feed.tag)
              feed.deliverCommitted(created.events)
              return created
            }
            return await transaction(async (tx) => {
              const created = await createRun(tx, input, options, feed.tag)
              noteAppended(tx, created.events)
              if ('run' in created) await within(tx, created.run)
              return created
            })
          } catch (error) {
            if (attempt >= 3 || !isOneActiveRunViolation(error)) throw error
          }
        }
      },
      dispatchStep: (step) => dispatchSteps.submit(step),
      statement: async (fn) => {
        const result = await fn(root, feed.tag, deferFlush)
        if (result.flushDeferred) await walFlush!.after()
        if (result.events.length > 0) feed.deliverCommitted(result.events)
        return result
      },
      transition: async (fence, patch, writes, events, reads) => {
        const result = await runTransition(root, fence, patch, writes, events, feed.tag, reads)
        if (result && result.events.length > 0) feed.deliverCommitted(result.events)
        return result
      },
      ping: async () => {
        await sql`select 1`.execute(db)
      },
      quiet: connection.quiet ?? (async () => undefined),
      close: async () => {
        await feed.close()
        await db.destroy()
      },
    }
  } catch (error) {
    await connection.pool.end().catch(() => undefined)
    throw error
  }
}

/** Applies pending migrations, or (with `apply` false) only checks that none are pending. */
async function prepareSchema(pool: PostgresPool, apply: boolean): Promise<MigrationResult> {
  const migrations = await readMigrations()
  if (apply) return migrate(pool, migrations)
  const client = await pool.connect()
  try {
    const { rows } = await client
      .query<{ name: string }>(
        "select name from plinth_migrations where to_regclass('plinth_migrations') is not null and $1::int = 1",
        [1],
      )
      .catch(() => ({ rows: [] as { name: string }[] }))
    const applied = new Set(rows.map((row) => row.name))
    const pending = migrations.filter((migration) => !applied.has(migration.name))
    if (pending.length > 0) {
      throw new StoreError(
        'migrations_pending',
        `database has ${pending.length} pending migration(s); run \`plinth migrate\``,
      )
    }
    return { applied: [], alreadyApplied: applied.size }
  } finally {
    client.release()
  }
}

/** Listens on channels (`undefined` payload: the listener reconnected and may have missed some). */
type Listen = (handlers: Record<string, (payload?: string) => void>) => Promise<() => Promise<void>>

interface Connection {
  engine: Engine
  pool: PostgresPool
  listen: Listen
  /** See {@link Store.quiet}; absent: at once. */
  quiet?: (maxWaitMs: number) => Promise<void>
}

/**
 * Every session searches HNSW indexes iteratively (a filtered search still finds k rows) and with a
 * far wider candidate list than the default 40 (recall@10 0.97 at 100k chunks in the bench).
 */
const vectorSearchSettings = { 'hnsw.iterative_scan': 'relaxed_order', 'hnsw.ef_search': '400' }
const sessionOptions = (settings: Record<string, string>): string =>
  Object.entries(settings)
    .map(([name, value]) => `-c ${name}=${value}`)
    .join(' ')

async function connectPostgres(
  url: string,
  poolSize: number,
  session: { prepare: boolean; synchronousCommit: boolean },
): Promise<Connection> {
  const { prepare } = session
  // int8 (event ids, counts) arrives as a string; callers convert where they need a number.
  const pool = new pg.Pool({
    connectionString: url,
    max: poolSize,
    connectionTimeoutMillis: 5000,
    // The operator's choice (pgSynchronousCommit): off, a commit is answered before its WAL flush.
    options: sessionOptions({
      ...vectorSearchSettings,
      ...(!session.synchronousCommit && { synchronous_commit: 'off' }),
    }),
  })
  pool.on('error', () => undefined) // idle-client errors surface on the next query instead
  // The pool listens for errors only on idle clients: a client Kysely holds between two statements of
  // a transaction when the server restarts would emit 'error' with no listener and end the process.
  // The failure reaches the transaction through its next statement; the pool drops the client on release.
  pool.on('connect', (client) => void client.on('error', () => undefined))
  guardParameters(pool)
  if (prepare) prepareRepeatedStatements(pool)
  try {
    const client = await pool.connect()
    client.release()
  } catch (error) {
    await pool.end().catch(() => undefined)
    throw new StoreError(
      'database_unreachable',
      `cannot connect to the database at ${redactUrl(url)}: ${describe(error)}`,
      {
        cause: error,
      },
    )
  }
  return { engine: 'pg', pool, listen: (handlers) => listenPostgres(url, handlers) }
}

/** LISTENs on a dedicated connection, reconnecting with backoff; a reconnect also wakes every handler. */
async function listenPostgres(
  url: string,
  handlers: Record<string, (payload?: string) => void>,
): Promise<() => Promise<void>> {
  let client: pg.Client | null = null
  let stopped = false
  let retryTimer: NodeJS.Timeout | null = null
  const connect = async (attempt: number): Promise<void> => {
    if (stopped) return
    const next = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 })
    next.on('notification', (message) => handlers[message.channel]?.(message.payload))
    next.on('error', () => {
      next.end().catch(() => undefined)
      if (client === next) client = null
      scheduleReconnect(0)
    })
    try {
      await next.connect()
      for (const channel of Object.keys(handlers)) await next.query(`listen ${channel}`)
      client = next
      for (const handler of Object.values(handlers)) handler()
    } catch {
      next.end().catch(() => undefined)
      scheduleReconnect(attempt + 1)
    }
  }
  const scheduleReconnect = (attempt: number): void => {
    if (stopped || retryTimer) return
    retryTimer = setTimeout(
      () => {
        retryTimer = null
        void connect(attempt)
      },
      Math.min(5000, 100 * 2 ** attempt),
    )
    retryTimer.unref()
  }
  await connect(0)
  return async () => {
    stopped = true
    if (retryTimer) clearTimeout(retryTimer)
    await client?.end().catch(() => undefined)
  }
}

async function connectPGlite(options: StoreOptions): Promise<Connection> {
  const { PGlite, protocol } = await import('@electric-sql/pglite')
  const { vector } = await import('@electric-sql/pglite/vector')
  let dataDir: string | undefined
  let unlock = async (): Promise<void> => undefined
  if (options.dataDir && !options.pgliteDump) {
    dataDir = join(options.dataDir, 'pg')
    await ensureWritable(options.dataDir)
    unlock = await lockDataDir(options.dataDir, options.lockWait)
  }
  let pglite
  try {
    // A new data directory starts from the migrated template the build ships (when there is one),
    // instead of running PGlite's initdb and every migration.
    if (dataDir) await unpackTemplate(dataDir, options.pgliteTemplate ?? pgliteTemplatePath)
    // Small buffers and few connections (there is one): idle RSS ~300 → ~170 MB on a restart (measured).
    const tuning = ['-c', `shared_buffers=${options.pgliteSharedBuffers ?? '16MB'}`, '-c', 'max_connections=5']
    pglite = await PGlite.create({
      ...(dataDir && { dataDir }),
      ...(options.pgliteDump && { loadDataDir: options.pgliteDump }),
      extensions: { vector },
      initDbStartParams: tuning,
      startParams: [...PGlite.defaultStartParams, ...tuning],
    })
  } catch (error) {
    await unlock()
    throw error
  }
  for (const [name, value] of Object.entries(vectorSearchSettings)) await pglite.exec(`set ${name} = ${value}`)
  const prepared =
    options.prepareStatements === false ? undefined : new PGlitePreparedStatements(pglite, protocol.serialize)
  const pool = new PGlitePool(pglite, prepared)
  return {
    engine: 'pglite',
    pool: {
      connect: () => pool.connect(),
      end: async () => {
        await pool.end()
        await unlock()
      },
    },
    quiet: (maxWaitMs) => pool.quiet(maxWaitMs),
    listen: async (handlers) => {
      const stops = await Promise.all(
        Object.entries(handlers).map(([channel, handler]) => pglite.listen(channel, (payload) => handler(payload))),
      )
      return async () => {
        for (const stop of stops) await stop()
      }
    },
  }
}

async function ensureWritable(dir: string): Promise<void> {
  const probe = join(dir, `.write-probe-${process.pid}`)
  try {
    await mkdir(dir, { recursive: true })
    await writeFile(probe, '')
    await rm(probe, { force: true })
  } catch (error) {
    throw new StoreError('data_dir_unwritable', `data directory ${dir} is not writable: ${describe(error)}`, {
      cause: error,
    })
  }
}

/** The URL without its password, for messages. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url)
    if (parsed.password) parsed.password = '***'
    return parsed.toString()
  } catch {
    return '<unparsable database URL>'
  }
}

/** Where the build puts the migrated template (dist/pglite-template.tar.gz, beside dist/src). */
export const pgliteTemplatePath = fileURLToPath(new URL('../../pglite-template.tar.gz', import.meta.url))

function describe(error: unknown): string {
  if (error instanceof AggregateError && error.errors.length > 0) return describe(error.errors[0])
  const { code, message } = error as { code?: string; message?: string }
  return [code, message].filter(Boolean).join(' ') || String(error)
}

/**
 * A dump of a freshly migrated embedded database. Tests load it (`pgliteDump`) instead of running
 * initdb and the migrations once per file.
 */
export async function dumpMigratedPGlite(compression: 'none' | 'gzip' = 'none'): Promise<Blob> {
  const { PGlite } = await import('@electric-sql/pglite')
  const { vector } = await import('@electric-sql/pglite/vector')
  const pglite = await PGlite.create({ extensions: { vector } })
  try {
    await migrate(new PGlitePool(pglite), await readMigrations())
    return await pglite.dumpDataDir(compression)
  } finally {
    await pglite.close()
  }
}
