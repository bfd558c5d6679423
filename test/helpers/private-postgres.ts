import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readdirSync } from 'node:fs'
import { chown, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from './cli-process.js'
import { adminQuery } from './pg-admin.js'

/**
 * A Postgres server of the test's own (initdb in a temporary directory, its own port), so the test may
 * restart it (`pg_ctl restart -m fast`) without disturbing the suites sharing `TEST_DATABASE_URL`.
 * Needs the server binaries (Debian's `postgresql` package, as `.ci/run` installs) and pgvector in them.
 */
export interface PrivatePostgres {
  url: string
  port: number
  /** `pg_ctl restart -m fast`: every connection is closed, the server is back once this resolves. */
  restart(): Promise<void>
  stop(): Promise<void>
}

/** The directory of `initdb` and `pg_ctl`, newest major version first; undefined when not installed. */
function serverBinaries(): string | undefined {
  const root = '/usr/lib/postgresql'
  if (!existsSync(root)) return undefined
  const versions = readdirSync(root)
    .filter((name) => /^\d+$/.test(name))
    .sort((a, b) => Number(b) - Number(a))
  for (const version of versions) {
    const bin = join(root, version, 'bin')
    if (existsSync(join(bin, 'initdb')) && existsSync(join(bin, 'pg_ctl'))) return bin
  }
  return undefined
}

/** Why a private server cannot be started here, or undefined when it can. */
export function privatePostgresUnavailable(): string | undefined {
  if (!serverBinaries()) return 'no Postgres server binaries under /usr/lib/postgresql'
  if (process.getuid?.() === 0 && !existsSync('/usr/sbin/runuser')) return 'running as root without runuser'
  return undefined
}

async function run(command: string, args: string[]): Promise<void> {
  // initdb and the server refuse to run as root: as root, they run as the `postgres` user.
  const [file, argv] =
    process.getuid?.() === 0 ? ['/usr/sbin/runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args]
  const child = spawn(file, argv, { stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()))
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()))
  const [code] = (await once(child, 'close')) as [number | null]
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${code}: ${output.slice(-2000)}`)
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = serverBinaries()
  if (!bin) throw new Error('no Postgres server binaries')
  const dir = await mkdtemp(join(tmpdir(), 'plinth-pg-'))
  if (process.getuid?.() === 0) {
    const { uid, gid } = await postgresUser()
    await chown(dir, uid, gid)
  }
  const data = join(dir, 'data')
  const port = await freePort()
  const pgCtl = join(bin, 'pg_ctl')
  // fsync off: the restarts are clean (`-m fast` writes a checkpoint); a test has no power failure to survive.
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`
  await run(join(bin, 'initdb'), ['-D', data, '-U', 'plinth', '--auth=trust', '-E', 'UTF8', '--no-sync'])
  await run(pgCtl, ['start', '-w', '-t', '120', '-D', data, '-l', join(dir, 'log'), '-o', options])
  const admin = `postgres://plinth@127.0.0.1:${port}/postgres`
  await adminQuery(admin, 'create database plinth')
  const url = `postgres://plinth@127.0.0.1:${port}/plinth`
  await adminQuery(url, 'create extension if not exists vector')
  return {
    url,
    port,
    restart: () =>
      run(pgCtl, ['restart', '-w', '-t', '120', '-m', 'fast', '-D', data, '-l', join(dir, 'log'), '-o', options]),
    async stop() {
      await run(pgCtl, ['stop', '-w', '-m', 'immediate', '-D', data]).catch(() => undefined)
      await rm(dir, { recursive: true, force: true })
    },
  }
}

async function postgresUser(): Promise<{ uid: number; gid: number }> {
  const child = spawn('id', ['postgres'], { stdio: ['ignore', 'pipe', 'ignore'] })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()))
  await once(child, 'close')
  const uid = /uid=(\d+)/.exec(output)?.[1]
  const gid = /gid=(\d+)/.exec(output)?.[1]
  if (!uid || !gid) throw new Error('there is no postgres user to run the server as')
  return { uid: Number(uid), gid: Number(gid) }
}
