import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { once } from 'node:events'
import { Webhook } from 'standardwebhooks'
import { waitFor } from './waits.js'

/** One request a receiver got. */
export interface Received {
  headers: Record<string, string>
  body: string
  at: number
}

/** What the receiver does with a request: a status (with optional headers), or 'hang' (never answers). */
export type Answer = number | { status: number; headers?: Record<string, string> } | 'hang'

/**
 * A webhook receiver on a loopback port: records every request and answers as `respond` says
 * (`respond` sees the requests so far, this one included).
 */
export class WebhookReceiver {
  readonly received: Received[] = []
  readonly #server: Server
  readonly #hanging = new Set<ServerResponse>()
  respond: (request: Received, all: Received[]) => Answer = () => 200
  port = 0

  constructor() {
    this.#server = createServer((request: IncomingMessage, response: ServerResponse) => {
      const chunks: Buffer[] = []
      request.on('data', (chunk: Buffer) => chunks.push(chunk))
      request.on('end', () => {
        const received: Received = {
          headers: request.headers as Record<string, string>,
          body: Buffer.concat(chunks).toString('utf8'),
          at: Date.now(),
        }
        this.received.push(received)
        const answer = this.respond(received, this.received)
        if (answer === 'hang') {
          this.#hanging.add(response)
          response.on('close', () => this.#hanging.delete(response))
          return
        }
        const { status, headers } = typeof answer === 'number' ? { status: answer, headers: {} } : answer
        response.writeHead(status, { 'content-type': 'text/plain', ...headers }).end('ok')
      })
    })
  }

  async listen(port = 0): Promise<this> {
    this.#server.listen(port, '127.0.0.1')
    await once(this.#server, 'listening')
    const address = this.#server.address()
    this.port = typeof address === 'object' && address ? address.port : 0
    return this
  }

  url(path = '/hook'): string {
    return `http://127.0.0.1:${this.port}${path}`
  }

  /** Answers every request left hanging. */
  release(status: number): void {
    for (const response of this.#hanging) response.writeHead(status).end()
    this.#hanging.clear()
  }

  /** Waits until `count` requests arrived (generous deadline). */
  async waitFor(count: number, timeoutMs = 30_000): Promise<Received[]> {
    await waitFor(() => this.received.length >= count, {
      timeoutMs,
      what: () => `${count} requests (got ${this.received.length})`,
    })
    return this.received
  }

  async close(): Promise<void> {
    for (const response of this.#hanging) response.destroy()
    this.#server.closeAllConnections()
    this.#server.close()
    await once(this.#server, 'close').catch(() => undefined)
  }
}

/** The payload, if the signature verifies under `secret` with the real `standardwebhooks` package; throws otherwise. */
export function verified(
  secret: string,
  received: Received,
): { type: string; timestamp: string; data: Record<string, unknown> } {
  return new Webhook(secret).verify(received.body, received.headers) as {
    type: string
    timestamp: string
    data: Record<string, unknown>
  }
}

/** Polls `read` until `done` holds (generous deadline); returns the last value. */
export async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 30_000): Promise<T> {
  let value = undefined as T
  await waitFor(
    async () => {
      value = await read()
      return done(value)
    },
    { timeoutMs, what: 'the condition', intervalMs: 50 },
  ).catch((error: unknown) => {
    throw new Error(`condition not met in time; last value: ${JSON.stringify(value).slice(0, 2000)}`, { cause: error })
  })
  return value
}
