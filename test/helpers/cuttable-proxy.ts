import { createServer, connect, type Server, type Socket } from 'node:net'

/** A TCP proxy in front of the server: `drop(ms)` cuts every connection and refuses new ones for a while. */
export class CuttableProxy {
  readonly #server: Server
  readonly #sockets = new Set<Socket>()
  #downUntil = 0
  port = 0

  constructor(private readonly target: number) {
    this.#server = createServer((client) => {
      if (Date.now() < this.#downUntil) return client.destroy()
      const upstream = connect(this.target, '127.0.0.1')
      for (const socket of [client, upstream]) {
        this.#sockets.add(socket)
        socket.on('close', () => this.#sockets.delete(socket))
        socket.on('error', () => socket.destroy())
      }
      client.pipe(upstream).pipe(client)
      client.on('close', () => upstream.destroy())
      upstream.on('close', () => client.destroy())
    })
  }
  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve))
    this.port = (this.#server.address() as { port: number }).port
  }
  drop(ms: number): void {
    this.#downUntil = Date.now() + ms
    for (const socket of this.#sockets) socket.destroy()
  }
  close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy()
    return new Promise((resolve) => this.#server.close(() => resolve()))
  }
}
