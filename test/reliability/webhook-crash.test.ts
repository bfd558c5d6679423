import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { freePort, http, lastLine, runPlinth, startServe, type ServeProcess } from '../helpers/cli-process.js'
import { createTestDatabase, testEngines, type TestDatabase } from '../helpers/engines.js'
import { until, verified, WebhookReceiver } from '../helpers/webhook-receiver.js'
import { recordFigures } from './figures.js'

// Webhook delivery across crashes (docs/webhooks.md#delivery): a real `plinth serve` is killed with
// SIGKILL between an event and its delivery — while the attempt is in flight (the receiver holds the
// request), and while the receiver is down (retries pending) — then started again: the message is
// delivered after the restart, exactly one attempt succeeds, and every attempt carried the same
// webhook-id and a valid signature.

describe('webhooks survive kill -9', () => {
  const cleanups: Array<() => Promise<void>> = []
  const rows: Array<{ check: string; figure: string; goal: string; ok: boolean }> = []
  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined)
    recordFigures('webhook-crash', rows)
  })

  for (const engine of testEngines()) {
    it(
      `${engine}: in flight and retrying when killed; delivered once after the restart`,
      { timeout: 300_000 },
      async () => {
        const cwd = await mkdtemp(join(tmpdir(), `plinth-hooks-${engine}-`))
        cleanups.push(() => rm(cwd, { recursive: true, force: true }))
        await writeFile(
          join(cwd, 'script.json'),
          JSON.stringify({ turns: [{ text: 'Done here.' }], whenExhausted: 'loop' }),
        )
        await writeFile(
          join(cwd, 'plinth.config.json'),
          JSON.stringify({
            models: [{ id: 'quick', provider: 'scripted', script: 'script.json' }],
            defaultModel: 'quick',
          }),
        )
        // Retries from 200 ms; an attempt's deadline (and so a dead instance's claim) is short.
        const env: Record<string, string> = {
          PLINTH_WEBHOOK_ALLOW_PRIVATE: '1',
          PLINTH_WEBHOOK_RETRY_BASE: '200ms',
          PLINTH_WEBHOOK_TIMEOUT: '2s',
        }
        let database: TestDatabase | undefined
        if (engine === 'postgres') {
          database = await createTestDatabase('postgres')
          env.DATABASE_URL = database.url!
          cleanups.push(() => database!.drop())
        }
        const servers: ServeProcess[] = []
        cleanups.push(async () => {
          for (const server of servers) await server.kill()
        })
        const start = async () => {
          const server = await startServe({ cwd, env })
          servers.push(server)
          return server
        }
        const kill = async (server: ServeProcess) => {
          server.child.kill('SIGKILL')
          await new Promise((resolve) => server.child.once('exit', resolve))
        }
        const token = lastLine((await runPlinth(['users', 'create', 'hooks'], { cwd, env })).stdout)

        // 1. The attempt is in flight when the server dies: the receiver got it but never answered.
        const holding = await new WebhookReceiver().listen()
        cleanups.push(() => holding.close())
        let first = await start()
        const project = await http(first.url, 'POST', '/api/projects', { token, body: { name: 'crash' } })
        const conversation = await http(first.url, 'POST', `/api/projects/${project.body.id}/conversations`, {
          token,
          body: {},
        })
        const hookA = await http(first.url, 'POST', `/api/projects/${project.body.id}/webhooks`, {
          token,
          body: { url: holding.url('/a'), events: ['run.completed'] },
        })
        expect(hookA.status).toBe(201)
        holding.respond = () => 'hang'
        const runA = await http(first.url, 'POST', `/api/conversations/${conversation.body.id}/runs?wait=true`, {
          token,
          body: { input: 'a' },
        })
        expect(runA.body.status).toBe('completed')
        await holding.waitFor(1)
        await kill(first)
        holding.respond = () => 200
        const second = await start()
        const [deliveredA] = await until(
          () =>
            http(second.url, 'GET', `/api/projects/${project.body.id}/webhooks/${hookA.body.id}/deliveries`, {
              token,
            }).then((answer) => answer.body.items as Array<Record<string, unknown>>),
          (items) => items[0]?.status === 'delivered',
          60_000,
        )
        const answeredA = holding.received.slice(1)
        expect(answeredA).toHaveLength(1)
        for (const request of holding.received)
          expect(verified(hookA.body.secret, request)).toMatchObject({
            type: 'run.completed',
            data: { id: runA.body.id },
          })
        expect(new Set(holding.received.map((request) => request.headers['webhook-id'])).size).toBe(1)
        const attemptsA = deliveredA!.attempts as Array<{ statusCode: number | null; error: string | null }>
        expect(attemptsA.map((attempt) => attempt.statusCode)).toEqual([null, 200])
        expect(attemptsA[0]!.error).toMatch(/no outcome recorded/)

        // 2. The receiver is down (retries pending) when the server dies; it comes back; so does the server.
        const downPort = await freePort()
        const hookB = await http(second.url, 'POST', `/api/projects/${project.body.id}/webhooks`, {
          token,
          body: { url: `http://127.0.0.1:${downPort}/b`, events: ['run.completed'] },
        })
        const runB = await http(second.url, 'POST', `/api/conversations/${conversation.body.id}/runs?wait=true`, {
          token,
          body: { input: 'b' },
        })
        expect(runB.body.status).toBe('completed')
        await until(
          () =>
            http(second.url, 'GET', `/api/projects/${project.body.id}/webhooks/${hookB.body.id}/deliveries`, {
              token,
            }).then((answer) => answer.body.items as Array<{ attempts: unknown[] }>),
          (items) => (items[0]?.attempts.length ?? 0) >= 2,
          60_000,
        )
        await kill(second)
        const back = await new WebhookReceiver().listen(downPort)
        cleanups.push(() => back.close())
        first = await start()
        await back.waitFor(1, 60_000)
        const [deliveredB] = await until(
          () =>
            http(first.url, 'GET', `/api/projects/${project.body.id}/webhooks/${hookB.body.id}/deliveries`, {
              token,
            }).then((answer) => answer.body.items as Array<Record<string, unknown>>),
          (items) => items[0]?.status === 'delivered',
          60_000,
        )
        await new Promise((resolve) => setTimeout(resolve, 500))
        expect(back.received).toHaveLength(1)
        expect(verified(hookB.body.secret, back.received[0]!)).toMatchObject({
          type: 'run.completed',
          data: { id: runB.body.id },
        })
        const attemptsB = deliveredB!.attempts as Array<{ statusCode: number | null }>
        expect(attemptsB.at(-1)!.statusCode).toBe(200)
        expect(attemptsB.filter((attempt) => attempt.statusCode === 200)).toHaveLength(1)
        // A's message was not sent again (A also got run B's message: a separate one).
        const messageA = holding.received[0]!.headers['webhook-id']
        expect(holding.received.filter((request) => request.headers['webhook-id'] === messageA)).toHaveLength(2)
        await first.stop()
        rows.push({
          check: `webhooks: kill -9 in flight and while retrying (${engine})`,
          figure: `delivered after restart, ${answeredA.length + back.received.length} successes for 2 messages`,
          goal: 'exactly one success each',
          ok: true,
        })
      },
    )
  }
})
