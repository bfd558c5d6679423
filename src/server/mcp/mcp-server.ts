import type { Server } from '@modelcontextprotocol/sdk/server/index.js'
import type { CommandBus, Params } from '../../cmdbus/index.js'
import { callTool } from './mcp-call.js'
import type { McpSdk } from './mcp-sdk.js'
import { describeTool, offeredCommand, offeredCommands, type McpScope } from './mcp-tools.js'

const instructions =
  'Plinth commands as tools, run for the user whose token you send. A call a person must approve is not run: ' +
  'its result says so (isError, structuredContent.status "awaiting_decision") with the decision id the user answers.'

/**
 * One MCP server for one HTTP request (stateless: nothing outlives the request, so any instance can
 * answer any request). Tools only: `tools/list` and `tools/call` over the caller's commands.
 */
export function createMcpServer(sdk: McpSdk, bus: CommandBus, scope: McpScope, version: string): Server {
  const server = new sdk.Server(
    { name: 'plinth', title: 'Plinth', version },
    { capabilities: { tools: { listChanged: false } }, instructions, jsonSchemaValidator: sdk.validator },
  )
  server.setRequestHandler(sdk.ListToolsRequestSchema, () => ({ tools: offeredCommands(bus, scope).map(({ command }) => describeTool(command)) }))
  server.setRequestHandler(sdk.CallToolRequestSchema, async (request) => {
    const command = offeredCommand(bus, scope, request.params.name)
    // As the specification asks for an unknown tool: a protocol error, not a tool result.
    if (!command) throw new sdk.McpError(sdk.ErrorCode.InvalidParams, `Tool ${request.params.name} not found`)
    return callTool(bus, scope, command, (request.params.arguments ?? {}) as Params)
  })
  return server
}
