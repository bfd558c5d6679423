import { createServer, connect, type Server, type Socket } from 'node:net'

/**
 * A TCP proxy in front of a server: `drop(ms)` cuts every connection and refuses new ones for a while;
 * `stall(ms)` keeps every connection open but forwards nothing for a while (a network that stops
 * answering: what was sent arrives after the stall, new connections are accepted and wait).
 */
export class CuttableProxy {
  readonly #server: Server
  readonly #sockets = new Set<Socket>()
  readonly #pairs = new Set<[Socket, Socket]>()
  #downUntil = 0
  #stalled: Promise<void> | null = null
  port = 0

  constructor(private readonly target: number) {
    this.#server = createServer((client) => {
      if (Date.now() < this.#downUntil) return client.destroy()
      client.on('error', () => client.destroy())
      this.#sockets.add(client)
      client.on('close', () => this.#sockets.delete(client))
      // During a stall the connection is accepted and waits; its bytes stay in the client socket.
      client.pause()
      void (this.#stalled ?? Promise.resolve()).then(() => this.#forward(client))
    })
  }
  #forward(client: Socket): void {
    if (client.destroyed) return
    const upstream = connect(this.target, '127.0.0.1')
    this.#sockets.add(upstream)
    upstream.on('close', () => this.#sockets.delete(upstream))
    upstream.on('error', () => upstream.destroy())
    const pair: [Socket, Socket] = [client, upstream]
    this.#pairs.add(pair)
    client.pipe(upstream).pipe(client)
    client.resume()
    client.on('close', () => {
      this.#pairs.delete(pair)
      upstream.destroy()
    })
    upstream.on('close', () => client.destroy())
  }
  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve))
    this.port = (this.#server.address() as { port: number }).port
  }
  drop(ms: number): void {
    this.#downUntil = Date.now() + ms
    for (const socket of this.#sockets) socket.destroy()
  }
  /** Forwards nothing, either way, for `ms`; resolves when forwarding has resumed. */
  async stall(ms: number): Promise<void> {
    const pairs = [...this.#pairs]
    for (const [client, upstream] of pairs) {
      client.unpipe(upstream)
      upstream.unpipe(client)
      client.pause()
      upstream.pause()
    }
    this.#stalled = new Promise((resolve) => setTimeout(resolve, ms))
    await this.#stalled
    this.#stalled = null
    for (const [client, upstream] of pairs) {
      if (client.destroyed || upstream.destroyed) continue
      client.pipe(upstream).pipe(client)
      client.resume()
      upstream.resume()
    }
  }
  close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy()
    return new Promise((resolve) => this.#server.close(() => resolve()))
  }
}
