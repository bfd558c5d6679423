import { definePlugin } from '../../../src/extension/index.js'

/** A plugin that ships an MCP server (the toy server over stdio) instead of writing commands. */
export default definePlugin({
  name: 'shipper',
  version: '2.1.0',
  surface: '^1.6.0',
  setup(registry) {
    registry.addMcpServer({
      name: 'shipped',
      transport: 'stdio',
      command: process.execPath,
      args: [new URL('../mcp/toy-server.mjs', import.meta.url).pathname],
      tools: { include: ['echo', 'delete-thing'] },
      risk: { perTool: { echo: 'low' } },
    })
  },
})
