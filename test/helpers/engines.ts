import { readFile } from 'node:fs/promises'
import { inject } from 'vitest'
import { openStore, type Store } from '../../src/store/index.js'
import { adminQuery, withDatabase } from './pg-admin.js'
import './provided-context.js'

export type TestEngine = 'pglite' | 'postgres'

/**
 * Both engines this run has, for a suite whose subject is the database (the store, the transitions,
 * the event feed, retrieval, crash recovery): PGlite always, Postgres when global setup found one.
 */
export function testEngines(): TestEngine[] {
  return inject('postgres') ? ['pglite', 'postgres'] : ['pglite']
}

/**
 * One engine, for a suite whose subject is the API above the store: Postgres when this run has one
 * (the engine where requests really run concurrently), else PGlite. PGlite stays covered end to end
 * by the suites that always use it (the CLI, the README, the console and most single-feature files).
 * `TEST_ALL_ENGINES=1` runs these suites on both (docs/guides/development.md#tests).
 */
export function apiEngines(): TestEngine[] {
  const engines = testEngines()
  return process.env.TEST_ALL_ENGINES === '1' ? engines : [engines.at(-1)!]
}

export interface TestDatabase {
  engine: TestEngine
  /** Opens (another) store on this database; for PGlite only one store may be open. */
  open(): Promise<Store>
  /** For Postgres: the URL of this file's database. */
  url?: string
  drop(): Promise<void>
}

let counter = 0

/** An isolated, migrated database for one test file (a PGlite clone or a Postgres database from the template). */
export async function createTestDatabase(engine: TestEngine): Promise<TestDatabase> {
  if (engine === 'pglite') {
    const dump = new Blob([await readFile(inject('pgliteTemplatePath'))])
    return { engine, open: () => openStore({ pgliteDump: dump }), drop: async () => undefined }
  }
  const postgres = inject('postgres')
  if (!postgres) throw new Error('no Postgres in this run')
  const name = `plinth_t_${process.pid}_${Date.now().toString(36)}_${counter++}`
  await retry(() => adminQuery(postgres.adminUrl, `create database ${name} template ${postgres.templateDb}`))
  const url = withDatabase(postgres.adminUrl, name)
  return {
    engine,
    url,
    open: () => openStore({ databaseUrl: url, poolSize: 5 }),
    drop: () => adminQuery(postgres.adminUrl, `drop database if exists ${name} with (force)`),
  }
}

/** A store on a fresh test database; closing it also drops the database. */
export async function openTestStore(engine: TestEngine): Promise<Store> {
  const database = await createTestDatabase(engine)
  const store = await database.open()
  return {
    ...store,
    engine: store.engine,
    feed: store.feed,
    access: store.access,
    settings: store.settings,
    migrations: store.migrations,
    close: async () => {
      await store.close()
      await database.drop()
    },
  }
}

async function retry(fn: () => Promise<void>): Promise<void> {
  // Concurrent CREATE DATABASE … TEMPLATE from several files may briefly see the template in use.
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn()
    } catch (error) {
      if (attempt >= 20 || !/being accessed by other users/.test((error as Error).message)) throw error
      await new Promise((resolve) => setTimeout(resolve, 100 + Math.random() * 200))
    }
  }
}
