import { definePlugin } from '../../../src/extension/index.js'

/** Ships an MCP server that takes a secret from Plinth's environment (its value must never be logged). */
export default definePlugin({
  name: 'secretshipper',
  version: '1.0.0',
  surface: '^1.6.0',
  setup(registry) {
    registry.addMcpServer({
      name: 'secretive',
      transport: 'stdio',
      command: process.execPath,
      args: [new URL('../mcp/toy-server.mjs', import.meta.url).pathname],
      envFrom: { TOY_TOKEN: 'PLINTH_TEST_SHIPPED_SECRET' },
    })
  },
})
