import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openStore } from '../src/store/index.js'
import { http, lastLine, runPlinth, startServe, type ServeProcess } from './helpers/cli-process.js'
import { ledgerViolations } from './helpers/ledger.js'

// A real server process is killed with SIGKILL in the middle of a run, then started again on the
// same data directory: the run must end (failed, interrupted) with every tool call answered, the
// completed tool call must not run again, and the conversation must accept new messages.
describe('crash recovery', () => {
  let cwd: string
  const servers: ServeProcess[] = []
  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-crash-'))
    const slowText = Array.from({ length: 400 }, (_, index) => `word${index} `).join('')
    await writeFile(
      join(cwd, 'script.json'),
      JSON.stringify({ turns: [{ text: 'Pinging first.', toolCalls: [{ name: 'rdm__ping', arguments: { target: 'x' } }] }, { text: slowText, chunks: 400, delayMs: 50 }] }),
    )
    await writeFile(
      join(cwd, 'plinth.config.json'),
      JSON.stringify({ plugins: ['rdm'], models: [{ id: 'slow', provider: 'scripted', script: 'script.json' }], defaultModel: 'slow' }),
    )
  })
  afterAll(async () => {
    for (const server of servers) await server.kill()
    await rm(cwd, { recursive: true, force: true })
  })

  it('ends a run interrupted by SIGKILL on restart, answers its calls, and frees the conversation', { timeout: 240_000 }, async () => {
    const token = lastLine((await runPlinth(['users', 'create', 'crash'], { cwd })).stdout)
    const first = await startServe({ cwd })
    servers.push(first)
    const project = await http(first.url, 'POST', '/api/projects', { token, body: { name: 'p' } })
    const conversation = await http(first.url, 'POST', `/api/projects/${project.body.id}/conversations`, { token, body: {} })
    const run = await http(first.url, 'POST', `/api/conversations/${conversation.body.id}/runs`, { token, body: { input: 'go' } })
    expect(run.status).toBe(201)
    // Wait until the second model turn is streaming (the ping has completed).
    for (let attempt = 0; attempt < 200; attempt++) {
      const current = await http(first.url, 'GET', `/api/runs/${run.body.id}`, { token })
      if (current.body.iteration === 2) break
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    await new Promise((resolve) => setTimeout(resolve, 300))
    first.child.kill('SIGKILL')
    await new Promise((resolve) => first.child.once('exit', resolve))

    const second = await startServe({ cwd })
    servers.push(second)
    const after = await http(second.url, 'GET', `/api/runs/${run.body.id}`, { token })
    expect(after.body).toMatchObject({ status: 'failed', error: { code: 'interrupted' } })
    const messages = await http(second.url, 'GET', `/api/conversations/${conversation.body.id}/messages?limit=200`, { token })
    const roles = messages.body.items.map((message: { role: string; status: string }) => `${message.role}:${message.status}`)
    expect(roles).toEqual(['user:completed', 'assistant:completed', 'tool:completed', 'assistant:interrupted'])
    // What streamed before the crash is kept on the interrupted message.
    expect(messages.body.items.at(-1).content).toMatch(/^word0 word1 /)
    // The restart says what it did.
    expect(second.stdout()).toMatch(/"msg":"recovered 1 runs"/)
    const audit = await http(second.url, 'GET', '/api/audit?commandId=rdm.ping', { token })
    expect(audit.body.items).toHaveLength(1)
    expect(audit.body.items[0].status).toBe('succeeded')
    // The conversation is not blocked.
    const next = await http(second.url, 'POST', `/api/conversations/${conversation.body.id}/runs`, { token, body: { input: 'again' } })
    expect(next.status).toBe(201)
    await http(second.url, 'POST', `/api/runs/${next.body.id}/cancel`, { token })
    expect(await second.stop()).toBe(0)
    // Every tool call of every run, the killed one included, has exactly one result.
    const store = await openStore({ dataDir: join(cwd, 'data'), migrate: false })
    try {
      expect(await ledgerViolations(store.db)).toEqual([])
    } finally {
      await store.close()
    }
  })
})
