/**
 * The source of a plugin whose two tools — `<name>.count` (low risk) and `<name>.guarded` (high risk, so
 * a person decides) — log each execution's start and end (`<id> <runId> start|end`) to `executions.log`
 * beside the plugin file, taking `ms` in between: a second execution of a call shows in the log.
 */
export function countingPlugin(name: string, ms: number): string {
  return `import { appendFile } from 'node:fs/promises'
import { definePlugin } from 'plinth/extension'
const log = new URL('./executions.log', import.meta.url)
const slow = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
export default definePlugin({
  name: '${name}',
  version: '1.0.0',
  surface: '^1.2.0',
  setup(registry) {
    for (const [id, risk] of [['${name}.count', 'low'], ['${name}.guarded', 'high']]) {
      registry.addCommand(
        {
          id,
          title: id,
          description: 'Counts its executions (' + risk + ' risk)',
          paramsSchema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false },
          risk,
          exposeAsTool: {},
        },
        async (params, context) => {
          await appendFile(log, id + ' ' + context.runId + ' start\\n')
          await slow(${ms})
          await appendFile(log, id + ' ' + context.runId + ' end\\n')
          return { counted: params.n }
        },
      )
    }
  },
})
`
}
