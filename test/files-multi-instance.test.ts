import { existsSync } from 'node:fs'
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { sql, testDb } from '../src/store/test-access.js'
import { http, lastLine, runPlinth, startServe, type ServeProcess } from './helpers/cli-process.js'
import { createTestDatabase, testEngines, type TestDatabase } from './helpers/engines.js'
import { sandboxAvailable } from './helpers/sandbox.js'
import { waitFor, waitForRoundStreaming } from './helpers/waits.js'

// Work directories that follow the conversation (docs/guides/scaling.md#files): two `plinth serve`
// processes on one Postgres, each with its own data directory, so a file is on the other instance only
// if it went through the database.
const engines = testEngines()
if (!engines.includes('postgres'))
  console.warn('[plinth tests] skipping the shared work-directory tests: they need Postgres (TEST_DATABASE_URL)')
const probe = engines.includes('postgres') ? await sandboxAvailable('shared work directories (sandbox)') : null
const backends: Array<'direct' | 'sandbox'> = ['direct', ...(probe?.ok ? (['sandbox'] as const) : [])]

describe.skipIf(!engines.includes('postgres')).each(backends)('work files across two instances (%s)', (backend) => {
  let cwd: string
  let database: TestDatabase
  let store: Store
  let token: string
  let a: ServeProcess
  let b: ServeProcess
  const dataDirs: Record<'a' | 'b', string> = { a: '', b: '' }
  const servers: ServeProcess[] = []

  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-files-'))
    database = await createTestDatabase('postgres')
    store = await database.open()
    const exec = (command: string) => ({ name: 'exec', arguments: { command } })
    const scripts = {
      writer: {
        turns: [{ toolCalls: [exec('mkdir -p out && echo written-on-a > out/note.txt')] }, { text: 'Written.' }],
      },
      reader: { turns: [{ toolCalls: [exec('cat out/note.txt && echo from-b > back.txt')] }, { text: 'Read.' }] },
      takeover: {
        turnBy: 'round',
        turns: [
          { toolCalls: [exec('echo survived > kept.txt')] },
          {
            text: Array.from({ length: 150 }, (_, index) => `word${index} `).join(''),
            chunks: 150,
            delayMs: 40,
            toolCalls: [{ name: 'read_file', arguments: { path: 'kept.txt' } }],
          },
          { text: 'Done.' },
        ],
      },
    }
    for (const [name, script] of Object.entries(scripts))
      await writeFile(join(cwd, `${name}.json`), JSON.stringify(script))
    await writeFile(
      join(cwd, 'plinth.config.json'),
      JSON.stringify({
        // Small enough for the replacement test below, roomy for the programs' few bytes.
        exec: { backend, quota: { conversationBytes: 4096 } },
        models: Object.keys(scripts).map((id) => ({ id, provider: 'scripted', script: `${id}.json` })),
        defaultModel: 'writer',
      }),
    )
    // A retention sweep every second: each instance then removes its copies of purged conversations soon.
    const env = { DATABASE_URL: database.url!, PLINTH_RUN_LEASE: '2s', PLINTH_RETENTION_SWEEP: '1s' }
    token = lastLine((await runPlinth(['users', 'create', 'files'], { cwd, env })).stdout)
    for (const name of ['a', 'b'] as const) {
      // The sandbox user reaches its directory through the data directory (traversable, not listable).
      dataDirs[name] = await mkdtemp(join(tmpdir(), `plinth-files-${name}-`))
      await chmod(dataDirs[name], 0o711)
    }
    a = await startServe({ cwd, env: { ...env, PLINTH_DATA_DIR: dataDirs.a } })
    b = await startServe({ cwd, env: { ...env, PLINTH_DATA_DIR: dataDirs.b } })
    servers.push(a, b)
  }, 180_000)
  afterAll(async () => {
    for (const server of servers) await server.kill()
    await store?.close()
    await database?.drop()
    for (const dir of [cwd, dataDirs.a, dataDirs.b]) if (dir) await rm(dir, { recursive: true, force: true })
  })

  const newConversation = async (): Promise<string> => {
    const project = await http(a.url, 'POST', '/api/projects', { token, body: { name: `p${Date.now()}` } })
    const conversation = await http(a.url, 'POST', `/api/projects/${project.body.id}/conversations`, {
      token,
      body: {},
    })
    await http(a.url, 'PATCH', `/api/conversations/${conversation.body.id}`, {
      token,
      body: { permissionMode: 'risky' },
    })
    return conversation.body.id as string
  }
  /** The run as `on` answers it, once `until` holds (polled gently: the address limiter counts these too). */
  const runOn = async (
    on: ServeProcess,
    runId: string,
    until: (run: { status: string }) => boolean,
    timeoutMs = 60_000,
  ): Promise<{ status: string; requiredAction?: unknown; error?: unknown }> => {
    let last: unknown
    try {
      return await waitFor(
        async () => {
          const run = await http(on.url, 'GET', `/api/runs/${runId}`, { token })
          last = run.body
          return run.status === 200 && until(run.body) ? run.body : null
        },
        { timeoutMs, intervalMs: 250, what: `run ${runId}` },
      )
    } catch (error) {
      throw new Error(`${(error as Error).message}; last seen: ${JSON.stringify(last)}`)
    }
  }
  /** Runs `model` on `on` to its end, approving what it asks through `on` (so its programs run there). */
  const runThrough = async (on: ServeProcess, conversationId: string, model: string): Promise<string> => {
    const run = await http(on.url, 'POST', `/api/conversations/${conversationId}/runs`, {
      token,
      body: { input: 'go', model },
    })
    expect(run.status).toBe(201)
    for (;;) {
      const state = await runOn(on, run.body.id, (candidate) =>
        ['requires_action', 'completed', 'failed', 'cancelled'].includes(candidate.status),
      )
      if (state.status !== 'requires_action') {
        expect([state.status, state.error]).toEqual(['completed', null])
        return run.body.id as string
      }
      const decisions = (state.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions
      for (const decision of decisions)
        await http(on.url, 'POST', `/api/decisions/${decision.decisionId}`, { token, body: { decision: 'approve' } })
    }
  }
  const toolOutputs = async (conversationId: string): Promise<string> => {
    const messages = await http(b.url, 'GET', `/api/conversations/${conversationId}/messages?limit=100`, { token })
    return JSON.stringify(
      (messages.body.items as Array<{ role: string; content: unknown }>).filter((message) => message.role === 'tool'),
    )
  }
  const onDisk = (instance: 'a' | 'b', conversationId: string, path: string): boolean =>
    existsSync(join(dataDirs[instance], 'work', conversationId, path))

  it('a file a program wrote on one instance is there for the next run on the other, and back', async () => {
    const conversationId = await newConversation()
    await runThrough(a, conversationId, 'writer')
    expect(onDisk('a', conversationId, 'out/note.txt')).toBe(true)
    expect(onDisk('b', conversationId, 'out/note.txt')).toBe(false)
    await runThrough(b, conversationId, 'reader')
    expect(await toolOutputs(conversationId)).toContain('written-on-a')
    // What the program on b wrote reaches a's files API, and a's listing.
    const back = await fetch(`${a.url}/api/conversations/${conversationId}/files/back.txt`, {
      headers: { authorization: `Bearer ${token}` },
    })
    expect([back.status, (await back.text()).trim()]).toEqual([200, 'from-b'])
    const listed = await http(a.url, 'GET', `/api/conversations/${conversationId}/files`, { token })
    expect(JSON.stringify(listed.body)).toContain('out/note.txt')
    // A delete through b's API is a delete on a too.
    expect((await http(b.url, 'DELETE', `/api/conversations/${conversationId}/files/out`, { token })).status).toBe(204)
    const gone = await http(a.url, 'GET', `/api/conversations/${conversationId}/files/out/note.txt`, { token })
    expect(gone.status).toBe(404)
  }, 120_000)

  it('replacing a file through the instance that has not read it yet needs room for the difference only', async () => {
    const conversationId = await newConversation()
    const upload = (server: ServeProcess, bytes: number) =>
      fetch(`${server.url}/api/conversations/${conversationId}/files/a.bin`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' },
        body: Buffer.alloc(bytes),
      })
    expect((await upload(a, 3000)).status).toBe(201)
    // 3,000 + 2,000 would pass the 4,096 bytes; 2,000 in place of 3,000 does not.
    const replaced = await upload(b, 2000)
    expect(replaced.status, await replaced.clone().text()).toBe(201)
    const listed = await http(a.url, 'GET', `/api/conversations/${conversationId}/files`, { token })
    expect(JSON.stringify(listed.body)).toContain('"size":2000')
    // Every instance lists the file with the time it was written (on b), not when its copy was made.
    await new Promise((resolve) => setTimeout(resolve, 20))
    const seen = await Promise.all(
      [a, b].map(async (server) => {
        const answer = await http(server.url, 'GET', `/api/conversations/${conversationId}/files`, { token })
        return (answer.body.items as Array<{ path: string; modifiedAt: string }>).find((item) => item.path === 'a.bin')
          ?.modifiedAt
      }),
    )
    expect(seen[0]).toBeDefined()
    expect(seen[0]).toBe(seen[1])
  }, 60_000)

  it("a conversation purged by retention leaves no copy of its files on either instance's disk", async () => {
    const conversationId = await newConversation()
    const other = await newConversation()
    for (const id of [conversationId, other]) {
      const put = await fetch(`${a.url}/api/conversations/${id}/files/private.txt`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' },
        body: "someone else's data",
      })
      expect(put.status).toBeLessThan(300)
      // b's listing brings the file into b's copy.
      expect(JSON.stringify((await http(b.url, 'GET', `/api/conversations/${id}/files`, { token })).body)).toContain(
        'private.txt',
      )
    }
    for (const instance of ['a', 'b'] as const) expect(onDisk(instance, conversationId, 'private.txt')).toBe(true)
    // What a retention sweep on some instance does to an idle conversation (its stored files go with it).
    await sql`update conversations set purged_at = now(), deleted_at = now() where id = ${conversationId}`.execute(
      testDb(store),
    )
    await waitFor(() => !onDisk('a', conversationId, '') && !onDisk('b', conversationId, ''), {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: 'both copies of the purged conversation removed',
    })
    // A live conversation's copies stay.
    for (const instance of ['a', 'b'] as const) expect(onDisk(instance, other, 'private.txt')).toBe(true)
  }, 120_000)

  it("a conversation deleted through one instance leaves no copy of its files on the other's disk", async () => {
    const conversationId = await newConversation()
    const put = await fetch(`${a.url}/api/conversations/${conversationId}/files/private.txt`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' },
      body: 'to be deleted',
    })
    expect(put.status).toBeLessThan(300)
    expect(
      JSON.stringify((await http(b.url, 'GET', `/api/conversations/${conversationId}/files`, { token })).body),
    ).toContain('private.txt')
    expect((await http(a.url, 'DELETE', `/api/conversations/${conversationId}`, { token })).status).toBe(204)
    // At once on the instance that deleted it; at its next sweep on the other.
    expect(onDisk('a', conversationId, '')).toBe(false)
    await waitFor(() => !onDisk('b', conversationId, ''), {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: "b's copy of the deleted conversation removed",
    })
    const stored = await sql<{
      n: string
    }>`select count(*) as n from work_files where conversation_id = ${conversationId}`.execute(testDb(store))
    expect(Number(stored.rows[0]!.n)).toBe(0)
  }, 120_000)

  it('killed (kill -9) mid-run after its program wrote a file, the run goes on on the other instance, which sees it', async () => {
    const conversationId = await newConversation()
    const run = await http(a.url, 'POST', `/api/conversations/${conversationId}/runs`, {
      token,
      body: { input: 'go', model: 'takeover' },
    })
    expect(run.status).toBe(201)
    const runId = run.body.id as string
    const waiting = await runOn(
      a,
      runId,
      (state) => state.status === 'requires_action' || (state as { iteration?: number }).iteration === 2,
    )
    if (waiting.status === 'requires_action') {
      for (const decision of (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions)
        await http(a.url, 'POST', `/api/decisions/${decision.decisionId}`, { token, body: { decision: 'approve' } })
    }
    // The second round is streaming on a: its program ran there, and b has never seen the file.
    await waitForRoundStreaming(store, runId, 2, 60_000).catch(async (error: Error) => {
      throw new Error(
        `${error.message}: ${JSON.stringify((await http(b.url, 'GET', `/api/runs/${runId}`, { token })).body)}`,
      )
    })
    expect(onDisk('a', conversationId, 'kept.txt')).toBe(true)
    expect(onDisk('b', conversationId, 'kept.txt')).toBe(false)
    await a.kill()
    const ended = await runOn(b, runId, (state) => ['completed', 'failed', 'cancelled'].includes(state.status), 90_000)
    expect(ended.status).toBe('completed')
    expect(await toolOutputs(conversationId)).toContain('survived')
    expect(onDisk('b', conversationId, 'kept.txt')).toBe(true)
    // a comes back (later tests would use it): the same data directory, up to date.
    a = await startServe({
      cwd,
      env: {
        DATABASE_URL: database.url!,
        PLINTH_RUN_LEASE: '2s',
        PLINTH_RETENTION_SWEEP: '1s',
        PLINTH_DATA_DIR: dataDirs.a,
      },
    })
    servers.push(a)
  }, 180_000)
})
