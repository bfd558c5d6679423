import { startChildServer } from '../lib/child-server.js'
import type { Scenario } from '../lib/scenario.js'

/** `GET /` on a bare Fastify app: the reference the Plinth figures are read against. */
export function helloWorldScenario(): Scenario {
  return {
    name: 'fastify hello-world GET /',
    async start() {
      const server = await startChildServer('bench/servers/hello-server.ts')
      return {
        request: { url: `${server.url}/` },
        check: ({ body }) => (body === '{"hello":"world"}' ? undefined : `unexpected body ${body}`),
        stop: () => server.stop(),
      }
    },
  }
}
