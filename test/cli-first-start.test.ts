import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { http, lastLine, runPlinth, startServe, type ServeProcess } from './helpers/cli-process.js'
import { waitFor } from './helpers/waits.js'

const adminToken = 'admin-secret-0123456789'

// The quickstart in the order written: start first, then use the printed token, then manage users
// beside the running server (the embedded database is locked by it).
describe('first start and the CLI beside a running server', () => {
  let cwd: string
  let server: ServeProcess | undefined
  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-first-'))
  })
  afterAll(async () => {
    await server?.kill()
    await rm(cwd, { recursive: true, force: true })
  })
  // A started server announces itself to the CLI (data/server.json) once the first-user step is
  // done: what it printed by then is all it prints for that step.
  const announced = (started: ServeProcess): Promise<unknown> =>
    waitFor(
      async () =>
        (JSON.parse(await readFile(join(cwd, 'data', 'server.json'), 'utf8')) as { pid: number }).pid === started.pid,
      { timeoutMs: 60_000, what: `server ${started.pid} to announce itself in data/server.json` },
    )

  it(
    'creates the first user and prints its token once; users and tokens commands go through the admin API',
    { timeout: 240_000 },
    async () => {
      server = await startServe({ cwd, env: { PLINTH_ADMIN_TOKEN: adminToken } })
      const first = server
      await announced(first)
      // The token line follows the notice; wait until the pipe has delivered both, whole (newline-ended).
      const printed = await waitFor(
        (): string[] | undefined => {
          const lines = first.stdout().split('\n')
          const notice = lines.findIndex((line) => line.includes('created the first user'))
          return notice >= 0 && lines.length > notice + 2 ? lines : undefined
        },
        { what: 'the first-user notice and its token on stdout' },
      )
      const notice = printed.findIndex((line) => line.includes('created the first user "admin"'))
      expect(notice).toBeGreaterThanOrEqual(0)
      const token = printed[notice + 1]!
      expect(token).toMatch(/^plt_/)
      expect((await http(server.url, 'GET', '/api/me', { token })).body).toMatchObject({ name: 'admin' })

      const created = await runPlinth(['users', 'create', 'bob'], { cwd, env: { PLINTH_ADMIN_TOKEN: adminToken } })
      expect(created.code, created.stderr).toBe(0)
      expect(created.stderr).toMatch(/using its admin API/)
      const bobToken = lastLine(created.stdout)
      expect((await http(server.url, 'GET', '/api/me', { token: bobToken })).body).toMatchObject({ name: 'bob' })
      const list = await runPlinth(['users', 'list', '--json'], { cwd, env: { PLINTH_ADMIN_TOKEN: adminToken } })
      expect(
        JSON.parse(list.stdout)
          .map((user: { name: string }) => user.name)
          .sort(),
      ).toEqual(['admin', 'bob'])
      // What the admin API refuses is an error here too (exit 1, the server's reason), never a success.
      const env = { PLINTH_ADMIN_TOKEN: adminToken }
      const longName = await runPlinth(['tokens', 'create', 'bob', '--name', 'x'.repeat(300)], { cwd, env })
      expect([longName.code, longName.stdout]).toEqual([1, ''])
      expect(longName.stderr).toMatch(/100 characters/)
      const idShaped = await runPlinth(['users', 'create', '01M93E4CK540K1XXPYX10ZTVRP'], { cwd, env })
      expect([idShaped.code, idShaped.stderr]).toEqual([1, expect.stringMatching(/looks like an id/)])
      // Names are unique regardless of case, and found so.
      const tokens = await runPlinth(['tokens', 'list', 'BOB', '--json'], {
        cwd,
        env: { PLINTH_ADMIN_TOKEN: adminToken },
      })
      const tokenId = JSON.parse(tokens.stdout)[0].id as string
      expect(
        (await runPlinth(['tokens', 'revoke', tokenId], { cwd, env: { PLINTH_ADMIN_TOKEN: adminToken } })).code,
      ).toBe(0)
      expect((await http(server.url, 'GET', '/api/me', { token: bobToken })).status).toBe(401)

      // Without the admin token: the lock error says where the server is and what to set.
      const refused = await runPlinth(['users', 'create', 'carol'], { cwd })
      expect(refused.code).toBe(1)
      expect(refused.stderr).toMatch(new RegExp(`${server.url.replace(/[.]/g, '\\.')}.*PLINTH_ADMIN_TOKEN`))

      expect(await server.stop()).toBe(0)
      server = undefined
      // A graceful stop takes its announcement with it (a stale pid could name another process).
      await expect(readFile(join(cwd, 'data', 'server.json'), 'utf8')).rejects.toMatchObject({ code: 'ENOENT' })
      // The next start finds users: nothing is created or printed again.
      const again = await startServe({ cwd })
      server = again
      await announced(again)
      expect(again.stdout()).not.toMatch(/created the first user/)
    },
  )
})
