import { definePlugin } from '../../../src/extension/index.js'

// Its tool name collides with rdm.ping's projected name.
export default definePlugin({
  name: 'collide',
  version: '1.0.0',
  surface: '^1.0.0',
  setup(registry) {
    registry.addCommand(
      { id: 'collide.ping', title: 't', description: 'd', paramsSchema: { type: 'object' }, risk: 'low', exposeAsTool: { name: 'rdm__ping' } },
      () => ({}),
    )
  },
})
