import { definePlugin } from '../../../src/extension/index.js'

/** An exposed command that works until cancelled (for cancel-during-a-tool tests). */
export default definePlugin({
  name: 'slow',
  version: '1.0.0',
  surface: '^1.0.0',
  setup(registry) {
    registry.addCommand(
      { id: 'slow.wait', title: 'Wait', description: 'Waits until cancelled', paramsSchema: { type: 'object' }, risk: 'low', exposeAsTool: {} },
      (_params, context) =>
        new Promise((resolve) => {
          const timer = setTimeout(() => resolve({ waited: true }), 20_000)
          context.signal.addEventListener('abort', () => {
            clearTimeout(timer)
            resolve({ aborted: true })
          })
        }),
    )
  },
})
