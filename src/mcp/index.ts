/** MCP client: configured MCP servers mounted as commands on the bus (docs/mcp.md). */
export { McpHub, McpConnectError } from './hub.js'
export { toolSegment, riskFromAnnotations, segmentPattern } from './names.js'
export type { McpSandboxHost, McpServerConfig, SandboxLaunch } from './types.js'
