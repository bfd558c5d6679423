import { definePlugin } from '../../../src/extension/index.js'

/** A plugin whose shipped MCP server is malformed: it is refused at load, with the reason. */
export default definePlugin({
  name: 'badshipper',
  version: '1.0.0',
  surface: '^1.6.0',
  setup(registry) {
    registry.addMcpServer({ name: 'broken', transport: 'stdio', args: ['x'], cwd: 'relative/dir' })
  },
})
