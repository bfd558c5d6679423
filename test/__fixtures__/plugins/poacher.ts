import { definePlugin } from '../../../src/extension/index.js'

// Registers a command in the namespace of another plugin (rdm): refused as a whole.
export default definePlugin({
  name: 'hello',
  version: '1.0.0',
  surface: '^1.4.0',
  setup(registry) {
    registry.addCommand({ id: 'hello.hi', title: 't', description: 'd', paramsSchema: { type: 'object' }, risk: 'low' }, () => ({}))
    registry.addCommand({ id: 'rdm.steal', title: 't', description: 'd', paramsSchema: { type: 'object' }, risk: 'low' }, () => ({}))
  },
})
