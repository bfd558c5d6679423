import type { Registry } from '../../../src/extension/index.js'

interface PingParams {
  target?: string
}

/** `rdm.ping`: answers pong; the smallest possible command, handy to check a deployment. */
export function registerPing(registry: Registry): void {
  registry.addCommand<PingParams>(
    {
      id: 'rdm.ping',
      title: 'Ping',
      description: 'Answers pong with the time; use it to check that the rdm plugin is reachable.',
      paramsSchema: {
        type: 'object',
        properties: { target: { type: 'string', maxLength: 200, description: 'Optional name echoed back' } },
        additionalProperties: false,
      },
      risk: 'low',
      exposeAsTool: {},
      idempotent: false,
    },
    (params) => ({ pong: true, target: params.target ?? null, at: new Date().toISOString() }),
  )
}
