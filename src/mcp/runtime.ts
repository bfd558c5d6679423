// What talking to MCP servers needs: the SDK's client and zod, about 7 MB of heap and a tenth of a second
// to load. The hub imports this only when a server is configured (docs/reference/benchmarks.md#start-and-cli-latency).
export { auth } from '@modelcontextprotocol/sdk/client/auth.js'
export { McpConnection } from './connection.js'
export { LaunchTransport } from './launch-transport.js'
