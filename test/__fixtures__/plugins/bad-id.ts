import { definePlugin } from '../../../src/extension/index.js'

export default definePlugin({
  name: 'badid',
  version: '1.0.0',
  surface: '^1.0.0',
  setup(registry) {
    registry.addCommand({ id: 'badid.good', title: 't', description: 'd', paramsSchema: { type: 'object' }, risk: 'low' }, () => ({}))
    registry.addCommand({ id: 'BadId.Ping', title: 't', description: 'd', paramsSchema: { type: 'object' }, risk: 'low' }, () => ({}))
  },
})
