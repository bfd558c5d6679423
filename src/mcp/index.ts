/** MCP client: configured MCP servers mounted as commands on the bus (docs/mcp.md). */
export { openMcpHub, type McpHub, type McpHubDeps } from './hub.js'
export { McpConnectError } from './errors.js'
export { toolSegment, riskFromAnnotations, segmentPattern } from './names.js'
export type { McpSandboxHost, McpServerConfig, SandboxLaunch } from './types.js'
