import type { Server } from '@modelcontextprotocol/sdk/server/index.js'
import type { CommandBus, Params } from '../../cmdbus/index.js'
import { callTool } from './mcp-call.js'
import { McpContentNotFound, type McpContent } from './mcp-content.js'
import type { McpElicitor } from './mcp-elicitation.js'
import type { McpSdk } from './mcp-sdk.js'
import { describeTool, offeredCommand, offeredCommands, type McpScope } from './mcp-tools.js'

const instructions =
  'Plinth commands as tools, run for the user whose token you send. A call a person must approve is asked through ' +
  'elicitation when the client supports it; otherwise it is not run and its result says so (isError, ' +
  'structuredContent.status "awaiting_decision") with the decision id the user answers.'

/**
 * One MCP server for one HTTP request (nothing outlives the request; a session's state is in Postgres,
 * so any instance can answer any request). Tools only: `tools/list` and `tools/call` over the caller's
 * commands; with an elicitor, a call that needs a person is asked of the client.
 */
export function createMcpServer(
  sdk: McpSdk,
  deps: { bus: CommandBus; content: McpContent },
  scope: McpScope,
  version: string,
  elicitor: McpElicitor | null,
  closed: AbortSignal,
): Server {
  const { bus, content } = deps
  const server = new sdk.Server(
    { name: 'plinth', title: 'Plinth', version },
    {
      capabilities: {
        tools: { listChanged: false },
        resources: { listChanged: false },
        prompts: { listChanged: false },
      },
      instructions,
      jsonSchemaValidator: sdk.validator,
    },
  )
  // The protocol's "not found" for resources is -32002; an unknown prompt is invalid params.
  const notFound = (code: number) => (error: unknown) => {
    throw error instanceof McpContentNotFound ? new sdk.McpError(code, error.message) : error
  }
  server.setRequestHandler(sdk.ListResourcesRequestSchema, (request) =>
    content.listResources(request.params?.cursor).catch(notFound(sdk.ErrorCode.InvalidParams)),
  )
  server.setRequestHandler(sdk.ReadResourceRequestSchema, (request) =>
    content.readResource(request.params.uri).catch(notFound(-32002)),
  )
  server.setRequestHandler(sdk.ListPromptsRequestSchema, () => content.listPrompts())
  server.setRequestHandler(sdk.GetPromptRequestSchema, async (request) =>
    content.getPrompt(request.params.name).catch(notFound(sdk.ErrorCode.InvalidParams)),
  )
  server.setRequestHandler(sdk.ListToolsRequestSchema, () => ({
    tools: offeredCommands(bus, scope).map(({ command }) => describeTool(command)),
  }))
  server.setRequestHandler(sdk.CallToolRequestSchema, async (request, extra) => {
    const command = offeredCommand(bus, scope, request.params.name)
    // As the specification asks for an unknown tool: a protocol error, not a tool result.
    if (!command) throw new sdk.McpError(sdk.ErrorCode.InvalidParams, `Tool ${request.params.name} not found`)
    const ask = elicitor && { elicitor, requestId: extra.requestId, signal: AbortSignal.any([extra.signal, closed]) }
    return callTool(bus, scope, command, (request.params.arguments ?? {}) as Params, ask)
  })
  return server
}
