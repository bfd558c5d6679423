import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openStore } from '../src/store/index.js'
import { http, lastLine, runPlinth, startServe, type ServeProcess } from './helpers/cli-process.js'
import { ledgerViolations } from './helpers/ledger.js'
import { settledRunStatuses, waitForRun } from './helpers/waits.js'

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
        expect(second.stdout()).toMatch(/"msg":"resumed 1 runs"/)
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
