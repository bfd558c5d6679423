import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openStore } from '../src/store/index.js'
import { http, lastLine, runPlinth, startServe, type ServeProcess } from './helpers/cli-process.js'
import { ledgerViolations } from './helpers/ledger.js'
import { settledRunStatuses, waitFor, waitForRun } from './helpers/waits.js'

// A real server process is stopped in the middle of a run — killed with SIGKILL, or asked to stop
// with SIGTERM — then started again on the same data directory: the run is resumed automatically
// from its last checkpoint and completes, the completed tool call does not run again, the turn that
// was cut off is kept (interrupted) and asked again, and every tool call has exactly one result.
describe('crash recovery', () => {
  let cwd: string
  const servers: ServeProcess[] = []
  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-crash-'))
    const slowText = Array.from({ length: 100 }, (_, index) => `word${index} `).join('')
    // turnBy "round": the turn follows the history, so the restarted server's model answers the same.
    await writeFile(
      join(cwd, 'script.json'),
      JSON.stringify({
        turnBy: 'round',
        turns: [
          { text: 'Pinging first.', toolCalls: [{ name: 'rdm__ping', arguments: { target: 'x' } }] },
          { text: slowText, chunks: 100, delayMs: 40 },
        ],
      }),
    )
    await writeFile(
      join(cwd, 'plinth.config.json'),
      JSON.stringify({
        plugins: ['rdm'],
        models: [{ id: 'slow', provider: 'scripted', script: 'script.json' }],
        defaultModel: 'slow',
      }),
    )
  })
  afterAll(async () => {
    for (const server of servers) await server.kill()
    await rm(cwd, { recursive: true, force: true })
  })

  for (const how of ['SIGKILL', 'SIGTERM'] as const) {
    it(
      `resumes a run stopped by ${how} on restart; the completed call is not run again`,
      { timeout: 240_000 },
      async () => {
        const token = lastLine((await runPlinth(['users', 'create', `crash-${how.toLowerCase()}`], { cwd })).stdout)
        const first = await startServe({ cwd })
        servers.push(first)
        const project = await http(first.url, 'POST', '/api/projects', { token, body: { name: 'p' } })
        const conversation = await http(first.url, 'POST', `/api/projects/${project.body.id}/conversations`, {
          token,
          body: {},
        })
        const run = await http(first.url, 'POST', `/api/conversations/${conversation.body.id}/runs`, {
          token,
          body: { input: 'go' },
        })
        expect(run.status).toBe(201)
        // Wait until the second model turn is streaming (the ping has completed).
        await waitForRun(first.url, token, run.body.id, (current) => current.iteration === 2)
        // Into that turn's stream: the child process's progress is not observable from here, so a short while.
        await new Promise((resolve) => setTimeout(resolve, 300))
        if (how === 'SIGKILL') {
          first.child.kill('SIGKILL')
          await new Promise((resolve) => first.child.once('exit', resolve))
        } else {
          // A graceful stop checkpoints the run and releases its lease, and exits cleanly.
          expect(await first.stop('SIGTERM')).toBe(0)
        }

        const second = await startServe({ cwd })
        servers.push(second)
        expect(second.stdout()).toMatch(/"msg":"recovered 1 runs"/)
        const after = await waitForRun(second.url, token, run.body.id, settledRunStatuses, 30_000)
        expect(after).toMatchObject({ status: 'completed', error: null, iteration: 2 })
        const messages = await http(
          second.url,
          'GET',
          `/api/conversations/${conversation.body.id}/messages?limit=200`,
          { token },
        )
        const roles = messages.body.items.map(
          (message: { role: string; status: string }) => `${message.role}:${message.status}`,
        )
        expect(roles).toEqual([
          'user:completed',
          'assistant:completed',
          'tool:completed',
          'assistant:interrupted',
          'assistant:completed',
        ])
        // What streamed before the stop is kept on the interrupted message; the answer was asked again.
        expect(messages.body.items[3].content).toMatch(/^word0 word1 /)
        expect(messages.body.items[4].content).toMatch(/word99 $/)
        const audit = await http(second.url, 'GET', '/api/audit?commandId=rdm.ping', { token })
        expect(audit.body.items).toHaveLength(1)
        expect(audit.body.items[0].status).toBe('succeeded')
        // The conversation is not blocked.
        const next = await http(second.url, 'POST', `/api/conversations/${conversation.body.id}/runs`, {
          token,
          body: { input: 'again' },
        })
        expect(next.status).toBe(201)
        await http(second.url, 'POST', `/api/runs/${next.body.id}/cancel`, { token })
        expect(await second.stop()).toBe(0)
        // Every tool call of every run, the stopped one included, has exactly one result.
        const store = await openStore({ dataDir: join(cwd, 'data'), migrate: false })
        try {
          expect(await ledgerViolations(store)).toEqual([])
        } finally {
          await store.close()
        }
      },
    )
  }
})

// A graceful stop lets a tool call in flight finish for up to PLINTH_SHUTDOWN_GRACE, however long
// that is: the process waits for it and exits cleanly, with the call recorded (docs/guides/agent-runs.md).
describe('shutdown grace', () => {
  let cwd: string
  const servers: ServeProcess[] = []
  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-grace-'))
    await writeFile(
      join(cwd, 'slow-plugin.js'),
      `import { definePlugin } from 'plinth/extension'
export default definePlugin({
  name: 'slow',
  version: '1.0.0',
  surface: '^1.2.0',
  setup(registry) {
    registry.addCommand(
      { id: 'slow.wait', title: 'Wait', description: 'Waits a while', paramsSchema: { type: 'object' }, risk: 'low', exposeAsTool: {} },
      async () => {
        await new Promise((resolve) => setTimeout(resolve, 11_000))
        return { waited: true }
      },
    )
  },
})
`,
    )
    await writeFile(
      join(cwd, 'script.json'),
      JSON.stringify({
        turnBy: 'round',
        turns: [{ text: 'Waiting.', toolCalls: [{ name: 'slow__wait', arguments: {} }] }, { text: 'Done.' }],
      }),
    )
    await writeFile(
      join(cwd, 'plinth.config.json'),
      JSON.stringify({
        plugins: ['./slow-plugin.js'],
        models: [{ id: 'slow', provider: 'scripted', script: 'script.json' }],
        defaultModel: 'slow',
      }),
    )
  })
  afterAll(async () => {
    for (const server of servers) await server.kill()
    await rm(cwd, { recursive: true, force: true })
  })

  it(
    'a tool call of 11 s finishes within a 20 s grace: the stop waits for it and exits 0',
    { timeout: 120_000 },
    async () => {
      const token = lastLine((await runPlinth(['users', 'create', 'grace'], { cwd })).stdout)
      const server = await startServe({ cwd, env: { PLINTH_SHUTDOWN_GRACE: '20s' } })
      servers.push(server)
      const project = await http(server.url, 'POST', '/api/projects', { token, body: { name: 'p' } })
      const conversation = await http(server.url, 'POST', `/api/projects/${project.body.id}/conversations`, {
        token,
        body: {},
      })
      const run = await http(server.url, 'POST', `/api/conversations/${conversation.body.id}/runs`, {
        token,
        body: { input: 'go' },
      })
      expect(run.status).toBe(201)
      // Stopped once the call is in flight (its dispatch running), not merely decided on.
      await waitFor(
        async () =>
          (await http(server.url, 'GET', '/api/audit?commandId=slow.wait', { token })).body.items?.[0]?.status ===
          'running',
        { timeoutMs: 30_000, intervalMs: 200, what: 'the call to run' },
      )
      expect(await server.stop('SIGTERM')).toBe(0)
      expect(server.stdout()).not.toMatch(/interrupted/)
      const store = await openStore({ dataDir: join(cwd, 'data'), migrate: false })
      try {
        expect(await ledgerViolations(store)).toEqual([])
      } finally {
        await store.close()
      }
      // The call's outcome was recorded by the stopping server: the next one has nothing to interrupt.
      const next = await startServe({ cwd })
      servers.push(next)
      const audit = await http(next.url, 'GET', '/api/audit?commandId=slow.wait', { token })
      expect(audit.body.items.map((item: { status: string }) => item.status)).toEqual(['succeeded'])
      expect(await next.stop()).toBe(0)
    },
  )
})
