import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { runPlinth } from './helpers/cli-process.js'
import { openTestStore } from './helpers/engines.js'
import { sandboxAvailable } from './helpers/sandbox.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { testDb } from '../src/store/test-access.js'

// An execution's own limits (its timeout, its captured output) must always produce the documented
// result: the bus's timeout and result cap are derived from them (docs/exec.md, "Bounds").
const probe = await sandboxAvailable('exec bounds (sandbox part)')

interface Answer {
  status: number
  body: Record<string, unknown> & { result?: Record<string, unknown>; code?: string }
}

async function setUp(
  backend: 'direct' | 'sandbox',
  exec: Record<string, unknown> = {},
): Promise<{
  store: Store
  server: TestServer
  alice: TestUser
  run: (id: string, params: object) => Promise<Answer>
}> {
  const store = await openTestStore('pglite')
  const server = await startTestServer(store, { exec: { backend, ...exec } })
  const alice = await server.createUser()
  const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'bounds' } }))
    .body.id
  const conversationId = (
    await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
  ).body.id
  const run = async (id: string, params: object): Promise<Answer> => {
    const answer = await server.request('POST', `/api/commands/${id}`, {
      token: alice.token,
      body: { entrance: 'button', conversationId, params },
    })
    if (answer.status !== 202) return answer
    const decided = await server.request('POST', `/api/decisions/${answer.body.decision.id}`, {
      token: alice.token,
      body: { decision: 'approve' },
    })
    const dispatch = decided.body.dispatch as {
      status: string
      result?: Record<string, unknown>
      error?: { code: string }
    }
    return {
      status: dispatch.status === 'succeeded' ? 200 : 502,
      body: { ...dispatch, ...(dispatch.error && { code: dispatch.error.code }) },
    }
  }
  return { store, server, alice, run }
}

describe('an execution that outlives its timeout or floods its output still answers with its result', () => {
  let context: Awaited<ReturnType<typeof setUp>>
  beforeAll(async () => {
    // The default exec timeout (30 s): the bus's own timeout used to be the same 30 s and won the race.
    context = await setUp('direct')
  })
  afterAll(async () => {
    await context?.server.close()
    await context?.store.close()
  })

  it('keeps what the program printed before its exec timeout killed it (default settings)', async () => {
    const answer = await context.run('core.exec', { command: 'echo start; sleep 40; echo end' })
    expect(answer.body.code).toBeUndefined()
    expect(answer.status).toBe(200)
    expect(answer.body.result).toMatchObject({ timedOut: true, stdout: 'start\n', exitCode: null })
    const audit = await testDb(context.store)
      .selectFrom('dispatches')
      .select(['status'])
      .where('id', '=', String(answer.body.dispatchId ?? answer.body.id))
      .executeTakeFirst()
    if (audit) expect(audit.status).toBe('succeeded')
  }, 90_000)

  it('a flood comes back truncated (the head of each stream), within PLINTH_RESULT_MAX_BYTES', async () => {
    const answer = await context.run('core.exec', { command: 'yes | head -c 50000000; yes err | head -c 5000000 >&2' })
    expect(answer.status).toBe(200)
    const result = answer.body.result as { truncated: boolean; stdout: string; stderr: string }
    expect(result.truncated).toBe(true)
    expect(result.stdout.startsWith('y\ny\ny\n')).toBe(true)
    expect(result.stderr.startsWith('err\nerr\n')).toBe(true)
    expect(Buffer.byteLength(JSON.stringify(result))).toBeLessThanOrEqual(1024 * 1024)
  }, 90_000)

  it('output that JSON escaping inflates (control characters) is cut to fit too', async () => {
    const answer = await context.run('core.exec', { command: "head -c 3000000 /dev/zero | tr '\\0' '\\1'" })
    expect(answer.status).toBe(200)
    const result = answer.body.result as { truncated: boolean; stdout: string }
    expect(result.truncated).toBe(true)
    expect(result.stdout.length).toBeGreaterThan(100_000)
    expect(result.stdout.slice(0, 3)).toBe('\u0001\u0001\u0001')
  }, 90_000)
})

describe.skipIf(!probe.ok)('a flood in the sandbox', () => {
  let context: Awaited<ReturnType<typeof setUp>>
  beforeAll(async () => {
    context = await setUp('sandbox', { sandboxUser: process.env.PLINTH_TEST_SANDBOX_USER ?? 'plinth-sandbox' })
  })
  afterAll(async () => {
    await context?.server.close()
    await context?.store.close()
  })

  it('`yes | head -c 50000000` answers the truncated result, not result_too_large', async () => {
    const answer = await context.run('core.exec', { command: 'yes | head -c 50000000' })
    expect(answer.body.code).toBeUndefined()
    expect(answer.status).toBe(200)
    expect(answer.body.result).toMatchObject({ truncated: true, exitCode: 0, timedOut: false })
    expect(String((answer.body.result as { stdout: string }).stdout).startsWith('y\ny\n')).toBe(true)
  }, 90_000)
})

describe('the bounds are derived from one another and checked at start', () => {
  it('derives the captured output per stream from PLINTH_RESULT_MAX_BYTES when it is not set', async () => {
    const store = await openTestStore('pglite')
    const server = await startTestServer(store, { resultMaxBytes: 256 * 1024, exec: { backend: 'direct' } })
    try {
      const outputBytes = server.exec.settings.limits.outputBytes
      expect(2 * outputBytes).toBeLessThan(256 * 1024)
      expect(outputBytes).toBeGreaterThan(64 * 1024)
    } finally {
      await server.close()
      await store.close()
    }
  })

  it('`plinth serve` refuses exec output caps that cannot fit a result, naming both keys', async () => {
    const cwd = await mkdtemp(join(tmpdir(), 'plinth-bounds-'))
    try {
      const result = await runPlinth(['serve'], {
        cwd,
        env: { PORT: '0', PLINTH_RESULT_MAX_BYTES: String(64 * 1024), PLINTH_EXEC_OUTPUT_BYTES: String(1024 * 1024) },
        timeoutMs: 120_000,
      })
      expect(result.code).toBe(2)
      expect(result.stderr).toMatch(/exec\.limits\.outputBytes/)
      expect(result.stderr).toMatch(/PLINTH_RESULT_MAX_BYTES/)
    } finally {
      await rm(cwd, { recursive: true, force: true })
    }
  }, 150_000)
})
