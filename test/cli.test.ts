import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { http, lastLine, runPlinth, startServe, type CliResult, type ServeProcess } from './helpers/cli-process.js'
import { adminQuery, withDatabase } from './helpers/pg-admin.js'
import './helpers/provided-context.js'

// Every test here spawns the real `plinth` executable (bin/plinth.js through tsx) in a temporary
// working directory, so the default ./data and ./plinth.config.json land there. Each spawn costs
// seconds (tsx, PGlite start-up; a first initdb costs more), so the embedded-database suite walks
// one operator's session through a single data directory, test after test.

const tokenPattern = /^plt_[A-Za-z0-9_-]{43,}$/
const adminToken = 'admin-token-for-cli-tests-0123456789'
const spawnTimeout = 180_000

/** A stack frame line: errors must reach the operator as one message, not as a trace. */
const stackFrame = /^\s+at /m

function describeRun(result: CliResult): string {
  return `exit ${result.code} (signal ${result.signal})\nstdout:\n${result.stdout}\nstderr:\n${result.stderr}`
}

/** Asserts a successful run and returns its stdout. */
function succeeded(result: CliResult): string {
  expect(result.code, describeRun(result)).toBe(0)
  return result.stdout
}

async function tempDir(label: string): Promise<string> {
  return mkdtemp(join(tmpdir(), `plinth-cli-${label}-`))
}

describe('plinth CLI on the embedded database (one data directory, one operator session)', () => {
  let cwd: string
  const servers: ServeProcess[] = []
  // Carried from test to test: the session builds on what earlier steps created.
  let alice: { id: string; token: string } | undefined
  let carolToken: string | undefined

  const run = (args: string[], env: Record<string, string> = {}): Promise<CliResult> =>
    runPlinth(args, { cwd, env, timeoutMs: spawnTimeout })
  const serve = async (env: Record<string, string> = {}): Promise<ServeProcess> => {
    const server = await startServe({ cwd, env, timeoutMs: spawnTimeout })
    servers.push(server)
    return server
  }
  const requireAlice = (): { id: string; token: string } => {
    if (!alice) throw new Error('an earlier step (users create alice) failed')
    return alice
  }

  beforeAll(async () => {
    cwd = await tempDir('session')
  })

  afterAll(async () => {
    await Promise.all(servers.map((server) => server.kill()))
    await rm(cwd, { recursive: true, force: true })
  })

  it(
    'says what a call lacks before the usage, and answers -v with the version',
    async () => {
      const missing = await run(['users', 'create'])
      expect(missing.code).toBe(2)
      expect(missing.stderr).toMatch(/^plinth users create: missing <name>/)
      // An empty name is missing too, not an unknown subcommand.
      const empty = await run(['users', 'create', ''])
      expect([empty.code, empty.stderr]).toEqual([2, expect.stringMatching(/^plinth users create: missing <name>/)])
      const version = await run(['-v'])
      expect([version.code, version.stdout.trim()]).toEqual([0, expect.stringMatching(/^\d+\.\d+\.\d+/)])
    },
    2 * spawnTimeout,
  )

  it(
    'migrate on a fresh data directory applies the migrations, and a second run has nothing to do',
    async () => {
      // Every migration shipped in <package root>/migrations, in order, starting with the foundation.
      const shipped = (await readdir(new URL('../migrations/', import.meta.url)))
        .filter((name) => /^\d{4}_[\w-]+\.sql$/.test(name))
        .sort()
      expect(shipped[0]).toBe('0001_foundation.sql')
      // From the sources: a build starts a new data directory from its migrated template instead
      // (test/store.test.ts covers that), which would leave nothing to apply.
      const first = await run(['migrate'], { PLINTH_FROM_SOURCE: '1' })
      expect(succeeded(first).trim()).toBe(`applied ${shipped.join(', ')}`)
      // The default data directory is ./data in the working directory.
      expect(await readdir(join(cwd, 'data'))).toContain('pg')

      const second = await run(['migrate'])
      expect(succeeded(second).trim()).toBe('database is up to date')
    },
    2 * spawnTimeout,
  )

  it(
    'users create prints the token as the last line, --json prints {userId, token}, and a taken name exits 1',
    async () => {
      const created = await run(['users', 'create', 'alice'])
      const lines = succeeded(created).trimEnd().split('\n')
      expect(lines[0]).toMatch(/^created user alice \(\S+\)$/)
      expect(lines).toContain('token (shown once, store it now):')
      const token = lastLine(created.stdout)
      expect(token).toMatch(tokenPattern)
      const id = /\((\S+)\)/.exec(lines[0] ?? '')?.[1] ?? ''
      alice = { id, token }

      const json = await run(['users', 'create', 'carol', '--json'])
      const jsonLines = succeeded(json).trimEnd().split('\n')
      expect(jsonLines).toHaveLength(1)
      const issued = JSON.parse(jsonLines[0] ?? '') as { userId: string; token: string }
      expect(Object.keys(issued).sort()).toEqual(['token', 'userId'])
      expect(issued.userId).toMatch(/^\S+$/)
      expect(issued.userId).not.toBe(id)
      expect(issued.token).toMatch(tokenPattern)
      expect(issued.token).not.toBe(token)
      carolToken = issued.token

      const duplicate = await run(['users', 'create', 'alice'])
      expect(duplicate.code, describeRun(duplicate)).toBe(1)
      expect(duplicate.stderr).toMatch(/"alice" already exists/)
      expect(duplicate.stderr).not.toMatch(stackFrame)
      expect(duplicate.stdout).not.toMatch(/plt_/)

      // The admin API's rule for names holds without a server too: nothing stored, nothing to print raw.
      for (const name of ['  ', 'two\nlines', 'a\u2028b', 'esc\u001b[31mred', 'x'.repeat(101)]) {
        const refused = await run(['users', 'create', name])
        expect(refused.code, describeRun(refused)).toBe(1)
        expect(refused.stderr).toMatch(/a user name has 1 to 100 characters/)
        expect(refused.stdout).not.toMatch(/plt_/)
      }
    },
    7 * spawnTimeout,
  )

  it(
    'tokens create/list/revoke and users disable: the list never shows a secret, and a revoked token or disabled user no longer authenticates',
    async () => {
      const { id: aliceId, token: aliceToken } = requireAlice()

      const laptop = await run(['tokens', 'create', 'alice', '--name', 'laptop', '--json'])
      const issued = JSON.parse(succeeded(laptop).trim()) as { userId: string; tokenId: string; token: string }
      expect(issued.userId).toBe(aliceId)
      expect(issued.token).toMatch(tokenPattern)

      // By id as well as by name; the plain form ends with the secret.
      const phone = await run(['tokens', 'create', aliceId, '--name', 'phone'])
      const phoneToken = lastLine(succeeded(phone))
      expect(phoneToken).toMatch(tokenPattern)

      // The admin API's limit on a token's name holds offline too.
      const longName = await run(['tokens', 'create', 'alice', '--name', 'x'.repeat(300)])
      expect([longName.code, longName.stderr]).toEqual([1, expect.stringMatching(/1 to 100 characters/)])

      const revoked = await run(['tokens', 'revoke', issued.tokenId])
      expect(succeeded(revoked)).toContain(`revoked token ${issued.tokenId}`)

      // A name is found regardless of case (names are unique regardless of case).
      const listed = await run(['tokens', 'list', 'Alice', '--json'])
      const listText = succeeded(listed)
      const tokens = JSON.parse(listText) as Array<Record<string, unknown>>
      expect(tokens.map((token) => token.name).sort()).toEqual(['default', 'laptop', 'phone'])
      for (const token of tokens) {
        expect(Object.keys(token).sort()).toEqual([
          'createdAt',
          'id',
          'lastUsedAt',
          'name',
          'prefix',
          'revokedAt',
          'userId',
        ])
        expect(token.userId).toBe(aliceId)
        expect(token.revokedAt === null).toBe(token.id !== issued.tokenId)
        expect(typeof token.prefix === 'string' && token.prefix.length > 0 && token.prefix.length < 20).toBe(true)
      }
      for (const secret of [aliceToken, issued.token, phoneToken]) expect(listText).not.toContain(secret)
      const laptopPrefix = tokens.find((token) => token.id === issued.tokenId)?.prefix
      expect(issued.token.startsWith(String(laptopPrefix))).toBe(true)

      expect(succeeded(await run(['users', 'disable', 'CAROL']))).toMatch(/^disabled user carol/)

      // PGlite is single-process: the server starts only after the CLI steps.
      const server = await serve()
      expect(server.url).toBe(`http://127.0.0.1:${server.port}`)
      expect(server.listening).toMatchObject({ engine: 'pglite', adminApi: false })

      const health = await http(server.url, 'GET', '/healthz')
      expect(health).toMatchObject({ status: 200, body: { status: 'ok' } })

      for (const token of [aliceToken, phoneToken]) {
        const me = await http(server.url, 'GET', '/api/me', { token })
        expect(me.status).toBe(200)
        expect(me.body).toEqual({
          id: aliceId,
          name: 'alice',
          disabled: false,
          budget: null,
          createdAt: expect.any(String),
        })
      }
      for (const token of [issued.token, carolToken ?? 'carol token missing']) {
        const denied = await http(server.url, 'GET', '/api/me', { token })
        expect(denied.status).toBe(401)
        expect(denied.contentType).toMatch(/^application\/problem\+json/)
        expect(denied.body).toMatchObject({ status: 401, code: 'unauthorized' })
      }
      // Without PLINTH_ADMIN_TOKEN the admin API does not exist.
      const admin = await http(server.url, 'POST', '/api/admin/users', { token: aliceToken, body: { name: 'mallory' } })
      expect(admin.status).toBe(404)

      expect(await server.stop()).toBe(0)
    },
    8 * spawnTimeout,
  )

  it(
    'keeps data across a restart: a project created before SIGTERM is listed by the next server',
    async () => {
      const { id: aliceId, token } = requireAlice()
      const first = await serve()
      const created = await http(first.url, 'POST', '/api/projects', { token, body: { name: 'survivor' } })
      expect(created.status).toBe(201)
      expect(created.body).toMatchObject({ ownerId: aliceId, name: 'survivor', id: expect.any(String) })
      expect(await first.stop('SIGTERM')).toBe(0)
      expect(first.stdout()).toContain('"msg":"shutting down"')
      // Logs go to stdout as JSON; a clean start and stop writes no warnings to stderr.
      expect(first.stderr()).toBe('')
      // A graceful stop releases the data directory.
      expect(await readdir(join(cwd, 'data'))).not.toContain('plinth.lock')

      const second = await serve()
      const listed = await http(second.url, 'GET', '/api/projects', { token })
      expect(listed.status).toBe(200)
      expect(listed.body.items).toEqual([
        expect.objectContaining({ id: created.body.id, name: 'survivor', ownerId: aliceId }),
      ])
      expect(listed.body.nextCursor).toBeNull()
      expect(await second.stop('SIGINT')).toBe(0)
    },
    4 * spawnTimeout,
  )

  it(
    'warns at start of designated approvers who name no active user',
    async () => {
      requireAlice()
      const server = await serve({ PLINTH_EXEC_BACKEND: 'direct', PLINTH_DIRECT_APPROVERS: 'alice,ghost' })
      const ready = await http(server.url, 'GET', '/readyz', {})
      expect(ready.body.warnings).toContainEqual(
        expect.stringMatching(/^exec\.directApprovers names no active user: "ghost" \(/),
      )
      expect(server.stdout()).toContain('exec.directApprovers names no active user: \\"ghost\\"')
      expect(await server.stop('SIGTERM')).toBe(0)
    },
    4 * spawnTimeout,
  )

  it(
    'goes on serving when its log reader goes away (a closed stdout), and still stops cleanly',
    async () => {
      const { token } = requireAlice()
      const server = await serve()
      // What `plinth serve | head -1` does once head has its line: the pipe's reading end closes.
      server.child.stdout!.destroy()
      for (let request = 0; request < 5; request++)
        expect((await http(server.url, 'GET', '/api/projects', { token })).status).toBe(200)
      expect((await http(server.url, 'GET', '/healthz', {})).status).toBe(200)
      expect(await server.stop('SIGTERM')).toBe(0)
      expect(server.stderr()).not.toContain('EPIPE')
    },
    4 * spawnTimeout,
  )

  it(
    'refuses CLI commands while a server holds the data directory, while the admin API works; the CLI works again after the server stops',
    async () => {
      const server = await serve({ PLINTH_ADMIN_TOKEN: adminToken })
      expect(server.listening).toMatchObject({ adminApi: true })

      const blocked = await run(['users', 'create', 'bob'])
      expect(blocked.code, describeRun(blocked)).toBe(1)
      expect(blocked.stderr).toContain('embedded database')
      expect(blocked.stderr).toContain(`in use by another Plinth process (pid ${server.pid})`)
      expect(blocked.stderr).toContain('stop it first')
      expect(blocked.stderr).toContain('admin API')
      expect(blocked.stderr).not.toMatch(stackFrame)
      expect(blocked.stdout).toBe('')

      // The server is unharmed by the refused command.
      expect((await http(server.url, 'GET', '/healthz')).status).toBe(200)

      const noAuth = await http(server.url, 'POST', '/api/admin/users', { body: { name: 'bob' } })
      expect(noAuth.status).toBe(401)
      expect(noAuth.contentType).toMatch(/^application\/problem\+json/)
      expect(noAuth.body).toMatchObject({ code: 'unauthorized' })

      const bob = await http(server.url, 'POST', '/api/admin/users', { token: adminToken, body: { name: 'bob' } })
      expect(bob.status).toBe(201)
      expect(bob.body.user).toMatchObject({ name: 'bob', disabled: false })
      expect(bob.body.token.token).toMatch(tokenPattern)
      const me = await http(server.url, 'GET', '/api/me', { token: bob.body.token.token })
      expect(me).toMatchObject({ status: 200, body: { id: bob.body.user.id, name: 'bob' } })

      const taken = await http(server.url, 'POST', '/api/admin/users', { token: adminToken, body: { name: 'alice' } })
      expect(taken.status).toBe(409)

      expect(await server.stop()).toBe(0)

      const list = await run(['users', 'list', '--json'])
      const users = JSON.parse(succeeded(list)) as Array<{ name: string; disabled: boolean }>
      expect(users.map((user) => [user.name, user.disabled]).sort()).toEqual([
        ['alice', false],
        ['bob', false],
        ['carol', true],
      ])
    },
    4 * spawnTimeout,
  )

  it(
    'takes over the lock of a server that was killed, without losing data',
    async () => {
      const { token } = requireAlice()
      const server = await serve()
      expect((await http(server.url, 'GET', '/api/me', { token })).status).toBe(200)
      await server.stop('SIGKILL')
      expect(await readdir(join(cwd, 'data'))).toContain('plinth.lock')

      const list = await run(['users', 'list'])
      const lines = succeeded(list).trimEnd().split('\n')
      expect(lines).toHaveLength(3)
      expect(lines.find((line) => line.endsWith('  carol  (disabled)'))).toBeDefined()
      expect(lines.find((line) => line.endsWith('  alice'))).toBeDefined()
    },
    3 * spawnTimeout,
  )
})

describe.concurrent('plinth CLI start-up failures: one clear message, no stack trace', () => {
  const dirs: string[] = []
  const freshDir = async (label: string): Promise<string> => {
    const dir = await tempDir(label)
    dirs.push(dir)
    return dir
  }

  afterAll(async () => {
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })))
  })

  it(
    'a bad configuration exits 2 and lists every bad key (env and file) in one message',
    async ({ expect }) => {
      const cwd = await freshDir('config')
      await writeFile(join(cwd, 'plinth.config.json'), JSON.stringify({ bogus: 1, port: 'x' }))
      const result = await runPlinth(['serve'], { cwd, env: { PORT: 'abc' }, timeoutMs: spawnTimeout })
      expect(result.code, describeRun(result)).toBe(2)
      expect(result.stdout).toBe('')
      expect(result.stderr).not.toMatch(stackFrame)
      expect(result.stderr.match(/invalid configuration/g)).toHaveLength(1)
      const problems = result.stderr
        .split('\n')
        .filter((line) => line.startsWith('  - '))
        .map((line) => line.slice(4))
      expect(problems).toHaveLength(3)
      expect(problems.find((problem) => problem.startsWith('PORT:'))).toContain('"abc"')
      expect(problems.find((problem) => problem.startsWith('bogus:'))).toContain('unknown key')
      expect(problems.find((problem) => problem.startsWith('port:'))).toBeDefined()
      // It failed before touching the database.
      expect(await readdir(cwd)).toEqual(['plinth.config.json'])
    },
    spawnTimeout,
  )

  it(
    'a bad configuration also stops the other commands',
    async ({ expect }) => {
      const cwd = await freshDir('config-users')
      const result = await runPlinth(['users', 'create', 'alice'], {
        cwd,
        env: { PLINTH_LOG_LEVEL: 'loud' },
        timeoutMs: spawnTimeout,
      })
      expect(result.code, describeRun(result)).toBe(2)
      expect(result.stderr).toMatch(/logLevel: must be one of/)
      expect(result.stderr).not.toMatch(stackFrame)
      expect(await readdir(cwd)).toEqual([])
    },
    spawnTimeout,
  )

  it(
    'an unreachable DATABASE_URL exits 1 saying it cannot connect, with the password redacted',
    async ({ expect }) => {
      const cwd = await freshDir('unreachable')
      const result = await runPlinth(['serve'], {
        cwd,
        env: { DATABASE_URL: 'postgres://u:secretpw@127.0.0.1:1/x', PORT: '0' },
        timeoutMs: spawnTimeout,
      })
      expect(result.code, describeRun(result)).toBe(1)
      expect(result.stderr).toContain('cannot connect to the database at postgres://u:***@127.0.0.1:1/x')
      expect(result.stderr + result.stdout).not.toContain('secretpw')
      expect(result.stderr).not.toMatch(stackFrame)
      // With a database URL, no embedded data directory is created.
      expect(await readdir(cwd)).toEqual([])
    },
    spawnTimeout,
  )

  it(
    'a data directory that cannot be written exits 1 saying so',
    async ({ expect }) => {
      const cwd = await freshDir('unwritable')
      // Below a regular file, so the directory cannot be created even as root (ENOTDIR).
      await writeFile(join(cwd, 'f'), 'not a directory')
      const result = await runPlinth(['serve'], {
        cwd,
        env: { PLINTH_DATA_DIR: 'f/data', PORT: '0' },
        timeoutMs: spawnTimeout,
      })
      expect(result.code, describeRun(result)).toBe(1)
      expect(result.stderr).toContain(`data directory ${join(cwd, 'f', 'data')} is not writable`)
      expect(result.stderr).not.toMatch(stackFrame)
    },
    spawnTimeout,
  )

  it(
    'an unknown command exits 2 with the usage',
    async ({ expect }) => {
      const cwd = await freshDir('unknown')
      const result = await runPlinth(['frobnicate'], { cwd, timeoutMs: spawnTimeout })
      expect(result.code, describeRun(result)).toBe(2)
      expect(result.stderr).toContain('unknown command: frobnicate')
      expect(result.stderr).toContain('plinth users create <name>')
      expect(await readdir(cwd)).toEqual([])
    },
    spawnTimeout,
  )
})

describe('plinth CLI on Postgres (DATABASE_URL)', () => {
  const adminUrl = inject('postgres')?.adminUrl ?? process.env.TEST_DATABASE_URL

  it(
    'users create and serve work against a fresh database',
    async (context) => {
      if (!adminUrl) {
        if (process.env.REQUIRE_PG === '1')
          throw new Error('REQUIRE_PG=1 but no Postgres is available (set TEST_DATABASE_URL)')
        const reason = 'no Postgres: set TEST_DATABASE_URL (or REQUIRE_PG=1 to make this a failure)'
        console.warn(`[plinth tests] skipping the CLI-on-Postgres test: ${reason}`)
        context.skip(reason)
        return
      }
      const database = `plinth_cli_${process.pid}_${Date.now().toString(36)}`
      const databaseUrl = withDatabase(adminUrl, database)
      const cwd = await tempDir('postgres')
      let server: ServeProcess | undefined
      await adminQuery(adminUrl, `create database ${database}`)
      try {
        const created = await runPlinth(['users', 'create', 'pgalice', '--json'], {
          cwd,
          env: { DATABASE_URL: databaseUrl },
          timeoutMs: spawnTimeout,
        })
        const issued = JSON.parse(succeeded(created).trim()) as { userId: string; token: string }
        expect(issued.token).toMatch(tokenPattern)

        const migrate = await runPlinth(['migrate'], {
          cwd,
          env: { DATABASE_URL: databaseUrl },
          timeoutMs: spawnTimeout,
        })
        expect(succeeded(migrate).trim()).toBe('database is up to date')

        // A list longer than a pipe holds (64 KiB) arrives whole: the CLI exits once its output is out.
        await adminQuery(
          databaseUrl,
          `insert into users (id, name) select '01JZZZZZZZZZZZZZZZZZ' || lpad(i::text, 6, '0'), 'bulk-user-' || i from generate_series(1, 3000) i`,
        )
        const listed = await runPlinth(['users', 'list', '--json'], {
          cwd,
          env: { DATABASE_URL: databaseUrl },
          timeoutMs: spawnTimeout,
          readStdoutAfterMs: 2_000,
        })
        expect(Buffer.byteLength(succeeded(listed))).toBeGreaterThan(256 * 1024)
        expect(JSON.parse(listed.stdout) as unknown[]).toHaveLength(3001)

        // A server on Postgres does not lock anything: the CLI keeps working beside it.
        server = await startServe({ cwd, env: { DATABASE_URL: databaseUrl }, timeoutMs: spawnTimeout })
        expect(server.listening).toMatchObject({ engine: 'pg' })
        const tokenForBob = await runPlinth(['users', 'create', 'pgbob'], {
          cwd,
          env: { DATABASE_URL: databaseUrl },
          timeoutMs: spawnTimeout,
        })
        const bobToken = lastLine(succeeded(tokenForBob))

        const me = await http(server.url, 'GET', '/api/me', { token: issued.token })
        expect(me).toMatchObject({ status: 200, body: { id: issued.userId, name: 'pgalice' } })
        expect((await http(server.url, 'GET', '/api/me', { token: bobToken })).body).toMatchObject({ name: 'pgbob' })
        expect(await server.stop()).toBe(0)
        // Nothing embedded was created in the working directory.
        expect(await readdir(cwd)).toEqual([])
      } finally {
        await server?.kill()
        await adminQuery(adminUrl, `drop database if exists ${database} with (force)`)
        await rm(cwd, { recursive: true, force: true })
      }
    },
    5 * spawnTimeout,
  )

  it(
    'beside a server with an admin API the CLI goes through it, and passes by a server that refuses its token',
    async (context) => {
      if (!adminUrl) {
        if (process.env.REQUIRE_PG === '1')
          throw new Error('REQUIRE_PG=1 but no Postgres is available (set TEST_DATABASE_URL)')
        context.skip('no Postgres: set TEST_DATABASE_URL (or REQUIRE_PG=1 to make this a failure)')
        return
      }
      const database = `plinth_cli_admin_${process.pid}_${Date.now().toString(36)}`
      const databaseUrl = withDatabase(adminUrl, database)
      const cwd = await tempDir('postgres-admin')
      let server: ServeProcess | undefined
      await adminQuery(adminUrl, `create database ${database}`)
      try {
        server = await startServe({
          cwd,
          env: { DATABASE_URL: databaseUrl, PLINTH_ADMIN_TOKEN: adminToken },
          timeoutMs: spawnTimeout,
        })
        const viaApi = await runPlinth(['users', 'create', 'pgcarol', '--json'], {
          cwd,
          env: { DATABASE_URL: databaseUrl, PLINTH_ADMIN_TOKEN: adminToken },
          timeoutMs: spawnTimeout,
        })
        const carol = JSON.parse(succeeded(viaApi).trim()) as { userId: string; token: string }
        expect(viaApi.stderr).toContain(`through the admin API of the server at ${server.url}`)
        expect((await http(server.url, 'GET', '/api/me', { token: carol.token })).body).toMatchObject({
          name: 'pgcarol',
        })

        // A token the server refuses: nothing was done there, so the CLI uses the database itself.
        const wrongToken = await runPlinth(['users', 'list'], {
          cwd,
          env: { DATABASE_URL: databaseUrl, PLINTH_ADMIN_TOKEN: 'not-the-servers-admin-token' },
          timeoutMs: spawnTimeout,
        })
        expect(succeeded(wrongToken)).toContain(`${carol.userId}  pgcarol`)
        expect(wrongToken.stderr).toContain('answered 401')
        expect(wrongToken.stderr).toContain('using the database')

        // A CLI given another database in the same directory acts on that database, not through this server.
        await adminQuery(adminUrl, `create database ${database}_other`)
        const elsewhere = await runPlinth(['users', 'create', 'pgdave', '--json'], {
          cwd,
          env: { DATABASE_URL: withDatabase(adminUrl, `${database}_other`), PLINTH_ADMIN_TOKEN: adminToken },
          timeoutMs: spawnTimeout,
        })
        const dave = JSON.parse(succeeded(elsewhere).trim()) as { userId: string; token: string }
        expect(elsewhere.stderr).not.toContain('admin API')
        expect((await http(server.url, 'GET', '/api/me', { token: dave.token })).status).toBe(401)

        expect(await server.stop()).toBe(0)
        // The announcement went with the server: the CLI uses the database without a word.
        const afterStop = await runPlinth(['users', 'list'], {
          cwd,
          env: { DATABASE_URL: databaseUrl, PLINTH_ADMIN_TOKEN: adminToken },
          timeoutMs: spawnTimeout,
        })
        expect(succeeded(afterStop)).toContain(`${carol.userId}  pgcarol`)
        expect(afterStop.stderr).not.toContain('admin API')
      } finally {
        await server?.kill()
        await adminQuery(adminUrl, `drop database if exists ${database} with (force)`)
        await adminQuery(adminUrl, `drop database if exists ${database}_other with (force)`)
        await rm(cwd, { recursive: true, force: true })
      }
    },
    5 * spawnTimeout,
  )
})
