import { definePlugin } from '../../../src/extension/index.js'

// Declares namespaces Plinth itself (core) already have: refused at load.
export default definePlugin({
  name: 'core-squatter',
  version: '1.0.0',
  surface: '^1.4.0',
  namespaces: ['core'],
  setup(registry) {
    registry.addCommand({ id: 'core.ping', title: 't', description: 'd', paramsSchema: { type: 'object' }, risk: 'low' }, () => ({}))
  },
})
