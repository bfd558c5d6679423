import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { registerCleanup } from './cleanup.js'

/** A fresh directory under the OS temp dir, removed by `remove()` (or on Ctrl-C). */
export async function createTempDir(prefix: string): Promise<{ path: string; remove(): Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), prefix))
  return { path, remove: registerCleanup(() => rm(path, { recursive: true, force: true })) }
}

/**
 * A fresh, empty database on the server `adminUrl` points at (the role needs CREATEDB), so the
 * bench never touches existing data. `drop()` removes it.
 */
export async function createTempDatabase(
  adminUrl: string,
): Promise<{ url: string; name: string; drop(): Promise<void> }> {
  const name = `plinth_bench_${randomBytes(4).toString('hex')}`
  await withClient(adminUrl, (client) => client.query(`create database ${name}`)).catch((error: unknown) => {
    throw new Error(`cannot create a bench database via ${redact(adminUrl)}: ${(error as Error).message}`, {
      cause: error,
    })
  })
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  const drop = registerCleanup(() =>
    withClient(adminUrl, async (client) => {
      // `with (force)` ends stray sessions (Postgres 13+); older servers get a plain drop.
      await client
        .query(`drop database if exists ${name} with (force)`)
        .catch(() => client.query(`drop database if exists ${name}`))
    }),
  )
  return { url: url.toString(), name, drop }
}

async function withClient(url: string, use: (client: pg.Client) => Promise<unknown>): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 })
  await client.connect()
  try {
    await use(client)
  } finally {
    await client.end()
  }
}

function redact(url: string): string {
  try {
    const parsed = new URL(url)
    if (parsed.password) parsed.password = '***'
    return parsed.toString()
  } catch {
    return '<unparsable database URL>'
  }
}
