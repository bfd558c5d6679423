import { CommandError, definePlugin } from '../../../src/extension/index.js'

/** Handlers that fail in each way a plugin can. */
export default definePlugin({
  name: 'misbehaving',
  version: '1.0.0',
  surface: '^1.0.0',
  setup(registry) {
    const base = { title: 't', description: 'd', paramsSchema: { type: 'object' }, risk: 'low' as const }
    registry.addCommand({ ...base, id: 'misbehaving.throws' }, () => {
      throw new Error('secret internal detail at /srv/x.js:12')
    })
    registry.addCommand({ ...base, id: 'misbehaving.refuses' }, () => {
      throw new CommandError('quota_exceeded', 'the quota is used up')
    })
    registry.addCommand({ ...base, id: 'misbehaving.hangs', timeoutMs: 300 }, (_params, context) => new Promise((resolve) => context.signal.addEventListener('abort', () => resolve({ aborted: true }))))
    registry.addCommand({ ...base, id: 'misbehaving.secret', paramsSchema: { type: 'object', properties: { apiKey: { type: 'string', 'x-sensitive': true }, note: { type: 'string' } } } }, (params) => ({ echoed: params.note ?? null, token: 'plt_abcdefghijklmnopqrstuvwxyz0123456789ABCD' }))
  },
})
