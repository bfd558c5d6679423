import { definePlugin } from '../../../src/extension/index.js'

/** A command whose risk a classifier decides per call (for "risk on the wire" tests). */
export default definePlugin({
  name: 'classified',
  version: '1.0.0',
  surface: '^1.0.0',
  setup(registry) {
    registry.addCommand<{ path: string }>(
      {
        id: 'classified.touch',
        title: 'Touch a path',
        description: 'Touches a path; paths under /etc are high risk, under /tmp medium',
        paramsSchema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'], additionalProperties: false },
        risk: (params) => (params.path.startsWith('/etc') ? 'high' : params.path.startsWith('/tmp') ? 'medium' : 'low'),
        exposeAsTool: {},
      },
      (params) => ({ touched: params.path }),
    )
  },
})
