import { connect, type Socket } from 'node:net'

export interface StalledClient {
  socket: Socket
  /** Bytes received before the client stopped reading. */
  received: number
  /** Resolves when the server closes the connection. */
  closed: Promise<void>
}

/**
 * Opens an HTTP GET on a raw socket, reads the first chunk of the answer and then stops reading
 * (the socket is paused and its receive buffer kept small), like a client that hung.
 */
export async function openStalledStream(url: string, path: string, token: string): Promise<StalledClient> {
  const { hostname, port } = new URL(url)
  const socket = connect({ host: hostname, port: Number(port) })
  let received = 0
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
  socket.on('error', () => undefined)
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve)
    socket.once('error', reject)
  })
  socket.write(
    `GET ${path} HTTP/1.1\r\nHost: ${hostname}\r\nAuthorization: Bearer ${token}\r\nAccept: text/event-stream\r\n\r\n`,
  )
  await new Promise<void>((resolve) => {
    socket.once('data', (chunk: Buffer) => {
      received += chunk.length
      socket.pause()
      resolve()
    })
  })
  return {
    socket,
    get received() {
      return received
    },
    closed,
  }
}

/** A metric's value from a Prometheus text page (0 when absent). */
export function metricValue(text: string, name: string, labels = ''): number {
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name}${labels} `))
  return line ? Number(line.split(' ').at(-1)) : 0
}
