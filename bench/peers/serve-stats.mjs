// What the peers bench reads from each peer server's process, as Plinth's bench server reports it:
// its CPU time (user + system) and RSS, over a second port.
import { createServer } from 'node:http'

/** A free loopback port (the peers' servers take a number, not 0). */
export async function freePort() {
  const probe = createServer()
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve))
  const { port } = probe.address()
  await new Promise((resolve) => probe.close(resolve))
  return port
}

/** Serves `{ cpuMs, rssMb }` and prints the bench's ready line for the server at `url`. */
export async function announce(url) {
  const stats = createServer((_request, response) => {
    const cpu = process.cpuUsage()
    response.setHeader('content-type', 'application/json')
    response.end(JSON.stringify({ cpuMs: (cpu.user + cpu.system) / 1000, rssMb: process.memoryUsage().rss / 2 ** 20 }))
  })
  await new Promise((resolve) => stats.listen(0, '127.0.0.1', resolve))
  console.log(`ready ${url} ${JSON.stringify({ statsUrl: `http://127.0.0.1:${stats.address().port}/` })}`)
  // The bench closes stdin when it goes: leave with it.
  process.stdin.on('end', () => process.exit(0)).resume()
}
