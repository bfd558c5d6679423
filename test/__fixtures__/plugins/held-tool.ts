import { existsSync } from 'node:fs'
import { definePlugin } from '../../../src/extension/index.js'

/** A command that works until the test creates the file it names (a call held open for as long as a test needs). */
const until = (params: { file: string }, context: { signal: AbortSignal }): Promise<{ released?: boolean; aborted?: boolean }> =>
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
  })

const paramsSchema = {
  type: 'object',
  properties: { file: { type: 'string' } },
  required: ['file'],
  additionalProperties: false,
} as const

export default definePlugin({
  name: 'held',
  version: '1.0.0',
  surface: '^1.0.0',
  setup(registry) {
    registry.addCommand<{ file: string }>(
      { id: 'held.until', title: 'Wait for a file', description: 'Returns once the file exists', paramsSchema, risk: 'low', exposeAsTool: {} },
      until,
    )
    registry.addCommand<{ file: string }>(
      {
        id: 'held.approved',
        title: 'Wait for a file, once approved',
        description: 'Returns once the file exists, after a person approves',
        paramsSchema,
        risk: 'low',
        confirm: true,
        exposeAsTool: {},
      },
      until,
    )
  },
})
