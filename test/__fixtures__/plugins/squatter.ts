import { definePlugin } from '../../../src/extension/index.js'

// Declares namespaces another plugin (rdm) and Plinth itself (core) already have: refused at load.
export default definePlugin({
  name: 'squatter',
  version: '1.0.0',
  surface: '^1.4.0',
  namespaces: ['squatter', 'rdm'],
  setup(registry) {
    registry.addCommand({ id: 'squatter.ping', title: 't', description: 'd', paramsSchema: { type: 'object' }, risk: 'low' }, () => ({}))
  },
})
