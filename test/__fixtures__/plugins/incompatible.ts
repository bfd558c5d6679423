import { definePlugin } from '../../../src/extension/index.js'

export default definePlugin({
  name: 'incompatible',
  version: '1.0.0',
  surface: '^2.0.0',
  setup(registry) {
    registry.addCommand({ id: 'incompatible.ping', title: 't', description: 'd', paramsSchema: { type: 'object' }, risk: 'low' }, () => ({}))
  },
})
