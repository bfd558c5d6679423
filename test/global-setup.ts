import { spawnSync } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import type { TestProject } from 'vitest/node'
import { dumpMigratedPGlite, openStore } from '../src/store/index.js'
import { adminQuery, withDatabase } from './helpers/pg-admin.js'
import { startPostgresContainer } from './helpers/postgres-container.js'
import './helpers/provided-context.js'

/**
 * Prepares what every test file clones: a migrated PGlite dump, and (when a Postgres server is
 * available) a migrated template database. Postgres comes from TEST_DATABASE_URL, or from a
 * pgvector container when a Docker engine answers; REQUIRE_PG=1 (CI) makes its absence fatal.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // The CLI tests run the compiled build, as `npm start` does: it starts in half the time of the
  // sources through tsx, and there are a hundred such starts. Compiled only when a source changed —
  // with declarations, as a package install builds it (test/external-plugins type-checks against them).
  const build = spawnSync(
    process.execPath,
    [fileURLToPath(new URL('../scripts/build-if-stale.mjs', import.meta.url)), '--declarations'],
    {
      stdio: 'inherit',
    },
  )
  if (build.status !== 0) throw new Error(`building dist/ for the CLI tests failed (exit ${build.status})`)
  const dir = await mkdtemp(join(tmpdir(), 'plinth-test-'))
  const templatePath = join(dir, 'pglite-template.tar')
  await writeFile(templatePath, Buffer.from(await (await dumpMigratedPGlite()).arrayBuffer()))
  project.provide('pgliteTemplatePath', templatePath)

  let adminUrl = process.env.TEST_DATABASE_URL
  let stopContainer: (() => Promise<void>) | undefined
  if (!adminUrl) {
    const container = await startPostgresContainer()
    if (container) {
      adminUrl = container.url
      stopContainer = container.stop
    }
  }
  if (!adminUrl && process.env.REQUIRE_PG === '1') {
    throw new Error(
      'REQUIRE_PG=1 but no Postgres: set TEST_DATABASE_URL (see scripts/ci-postgres.sh) or make a Docker engine reachable',
    )
  }
  if (!adminUrl) {
    console.warn(
      '\n[plinth tests] Postgres suites skipped: no TEST_DATABASE_URL and no Docker engine; running on PGlite only\n',
    )
    project.provide('postgres', null)
  } else {
    const templateDb = `plinth_tpl_${process.pid}`
    await adminQuery(adminUrl, `drop database if exists ${templateDb}`)
    await adminQuery(adminUrl, `create database ${templateDb}`)
    const store = await openStore({ databaseUrl: withDatabase(adminUrl, templateDb) })
    // Closed at once: an idle connection left open would be killed by the template's `drop … with (force)`
    // at teardown, an unhandled 'error' event that fails the run after every test passed.
    const versionPool = new pg.Pool({ connectionString: withDatabase(adminUrl, templateDb), max: 1 })
    const { rows } = await versionPool
      .query("select extversion from pg_extension where extname = 'vector'")
      .catch(() => ({ rows: [] as { extversion: string }[] }))
      .finally(() => versionPool.end())
    console.warn(
      `\n[plinth tests] Postgres suites run against ${new URL(adminUrl).host} with pgvector ${rows[0]?.extversion ?? '?'}\n`,
    )
    await store.close()
    project.provide('postgres', { adminUrl, templateDb })
    const previousStop = stopContainer
    stopContainer = async () => {
      await adminQuery(adminUrl as string, `drop database if exists ${templateDb} with (force)`).catch(() => undefined)
      await previousStop?.()
    }
  }

  return async () => {
    await stopContainer?.()
    await rm(dir, { recursive: true, force: true })
  }
}
