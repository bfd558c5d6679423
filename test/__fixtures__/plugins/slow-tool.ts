import { definePlugin } from '../../../src/extension/index.js'

/** Exposed commands that work until cancelled (for cancel-during-a-tool tests). */
export default definePlugin({
  name: 'slow',
  version: '1.0.0',
  surface: '^1.0.0',
  setup(registry) {
    registry.addCommand(
      { id: 'slow.wait', title: 'Wait', description: 'Waits until cancelled', paramsSchema: { type: 'object' }, risk: 'low', exposeAsTool: {} },
      (_params, context) =>
        new Promise((resolve, reject) => {
          const timer = setTimeout(() => resolve({ waited: true }), 20_000)
          context.signal.addEventListener('abort', () => {
            clearTimeout(timer)
            reject(new Error('cancelled'))
          })
        }),
    )
    // Finishes on its own after a moment (for a tool that ends after its run changed hands).
    registry.addCommand(
      { id: 'slow.brief', title: 'Brief wait', description: 'Waits 600 ms', paramsSchema: { type: 'object' }, risk: 'low', exposeAsTool: {} },
      () => new Promise((resolve) => setTimeout(() => resolve({ done: true }), 600)),
    )
    // A result of the size asked for (for result-size limit tests).
    registry.addCommand<{ bytes: number }>(
      {
        id: 'slow.big',
        title: 'Big result',
        description: 'Returns a text of the given size',
        paramsSchema: { type: 'object', properties: { bytes: { type: 'integer', minimum: 0 } }, required: ['bytes'] },
        risk: 'low',
        exposeAsTool: {},
      },
      (params) => ({ text: 'x'.repeat(params.bytes) }),
    )
    // The same, behind a human's confirmation (for cancel-after-approval tests).
    registry.addCommand(
      { id: 'slow.guarded', title: 'Wait (confirmed)', description: 'Waits until cancelled, after a human approves', paramsSchema: { type: 'object' }, risk: 'low', confirm: true, exposeAsTool: {} },
      (_params, context) =>
        new Promise((resolve, reject) => {
          const timer = setTimeout(() => resolve({ waited: true }), 20_000)
          context.signal.addEventListener('abort', () => {
            clearTimeout(timer)
            reject(new Error('cancelled'))
          })
        }),
    )
    // Behind a confirmation, and deaf to its signal (a handler whose work, once begun, completes).
    registry.addCommand(
      { id: 'slow.stubborn', title: 'Finish regardless', description: 'Works 800 ms whatever happens, after a human approves', paramsSchema: { type: 'object' }, risk: 'low', confirm: true, exposeAsTool: {} },
      () => new Promise((resolve) => setTimeout(() => resolve({ finished: true }), 800)),
    )
  },
})
