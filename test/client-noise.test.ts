import { connect } from 'node:net'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { waitFor } from './helpers/waits.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// What a client sends never reaches the operator's log as an error of the server's, nor as raw text.

describe('client input and the log', () => {
  let store: Store
  let server: TestServer
  let alice: TestUser
  let conversationId: string
  const logLines: Array<{ level: number; msg: string }> = []

  beforeAll(async () => {
    store = await openTestStore('pglite')
    const logger = pino(
      { level: 'info' },
      new Writable({
        write: (chunk, _encoding, done) => done(void logLines.push(JSON.parse(String(chunk)) as never)),
      }),
    )
    server = await startTestServer(store, { logger })
    alice = await server.createUser()
    const project = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'noise' } }))
      .body
    conversationId = (
      await server.request('POST', `/api/projects/${project.id}/conversations`, { token: alice.token, body: {} })
    ).body.id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  it('a client that hangs up halfway through its body is logged at info, not as a failure', async () => {
    const { port } = new URL(server.url)
    const before = logLines.length
    const socket = connect(Number(port), '127.0.0.1')
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()))
    socket.write(
      `PATCH /api/conversations/${conversationId} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${alice.token}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 50\r\n\r\n{"ti',
    )
    // The server has the headers and part of the body; then the client is gone.
    await new Promise((resolve) => setTimeout(resolve, 100))
    socket.destroy()
    await waitFor(() => logLines.slice(before).some((line) => /went away/.test(line.msg)))
    expect(logLines.slice(before).filter((line) => line.level >= 50)).toEqual([])
  })

  it('an output schema with an unknown format prints nothing of it; one that recurses is refused plainly', async () => {
    const printed = [vi.spyOn(console, 'warn'), vi.spyOn(console, 'log'), vi.spyOn(console, 'error')]
    const stderr = vi.spyOn(process.stderr, 'write')
    try {
      const forged = 'x\n{"level":60,"msg":"FAKE fatal injected"}'
      const run = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body: {
          input: 'hi',
          output: { schema: { type: 'object', properties: { a: { type: 'string', format: forged } } } },
        },
      })
      expect(run.status).toBe(201)
      for (const spy of [...printed, stderr])
        expect(spy.mock.calls.flat().join('')).not.toContain('FAKE fatal injected')
      expect(JSON.stringify(logLines)).not.toContain('FAKE fatal injected')
      await server.request('POST', `/api/runs/${run.body.id}/cancel`, { token: alice.token })
    } finally {
      for (const spy of [...printed, stderr]) spy.mockRestore()
    }
    const recursive = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: {
        input: 'hi',
        output: { schema: { $ref: '#/definitions/a', definitions: { a: { $ref: '#/definitions/a' } } } },
      },
    })
    expect(recursive.body).toMatchObject({ status: 400, code: 'output_schema_invalid' })
    expect(recursive.body.detail).not.toMatch(/call stack/i)
    expect(recursive.body.detail).toContain('refers to itself')
  })
})
