import { connect, type Socket } from 'node:net'

export interface RawAnswer {
  /** Everything the server sent before it closed (or the timeout). */
  text: string
  status: number
  /** The body as JSON when it parses. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary JSON
  json: any
  /** Whether the server closed the connection within the timeout. */
  closed: boolean
  elapsedMs: number
}

/** Opens a raw TCP connection to the server (for requests a well-behaved client would never send). */
export async function rawSocket(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url)
  const socket = connect({ host: hostname, port: Number(port) })
  socket.on('error', () => undefined)
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve)
    socket.once('error', reject)
  })
  return socket
}

/** Writes `bytes` and collects the answer until the server closes the connection or `timeoutMs` passes. */
export async function rawRequest(url: string, bytes: string | Buffer, timeoutMs = 5000): Promise<RawAnswer> {
  const started = Date.now()
  const socket = await rawSocket(url)
  return collect(socket, started, timeoutMs, () => socket.write(bytes))
}

/** Collects what a socket receives until it closes or `timeoutMs` passes. */
export function collect(socket: Socket, started: number, timeoutMs: number, start?: () => void): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    let closed = false
    const finish = (): void => {
      clearTimeout(timer)
      const text = Buffer.concat(chunks).toString('utf8')
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0)
      const body = text.split('\r\n\r\n').slice(1).join('\r\n\r\n')
      let json: unknown = undefined
      try {
        json = JSON.parse(body)
      } catch {
        // not JSON
      }
      socket.destroy()
      resolve({ text, status, json, closed, elapsedMs: Date.now() - started })
    }
    const timer = setTimeout(finish, timeoutMs)
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.once('close', () => {
      closed = true
      finish()
    })
    start?.()
  })
}
