import { existsSync } from 'node:fs'
import { definePlugin } from '../../../src/extension/index.js'

/** A command that works until the test creates the file it names (a call held open for as long as a test needs). */
export default definePlugin({
  name: 'held',
  version: '1.0.0',
  surface: '^1.0.0',
  setup(registry) {
    registry.addCommand<{ file: string }>(
      {
        id: 'held.until',
        title: 'Wait for a file',
        description: 'Returns once the file exists',
        paramsSchema: { type: 'object', properties: { file: { type: 'string' } }, required: ['file'], additionalProperties: false },
        risk: 'low',
        exposeAsTool: {},
      },
      (params, context) =>
        new Promise((resolve) => {
          const timer = setInterval(() => {
            if (!existsSync(params.file)) return
            clearInterval(timer)
            resolve({ released: true })
          }, 20)
          context.signal.addEventListener('abort', () => {
            clearInterval(timer)
            resolve({ aborted: true })
          })
        }),
    )
  },
})
