/** Baseline: bare Fastify hello-world, the ceiling any Fastify route on this machine can reach. */
import Fastify from 'fastify'
import { announceReady, fail } from '../lib/child-side.js'

try {
  const app = Fastify({ logger: false })
  app.get('/', async () => ({ hello: 'world' }))
  const address = await app.listen({ port: 0, host: '127.0.0.1' })
  announceReady(address, {}, () => app.close())
} catch (error) {
  fail(error)
}
