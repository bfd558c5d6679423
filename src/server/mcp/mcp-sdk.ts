import type { Server } from '@modelcontextprotocol/sdk/server/index.js'
import type { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import type {
  CallToolRequestSchema,
  ErrorCode,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
} from '@modelcontextprotocol/sdk/types.js'
import type { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv-provider.js'

/** The parts of the MCP SDK the `/mcp` routes use. */
export interface McpSdk {
  Server: typeof Server
  StreamableHTTPServerTransport: typeof StreamableHTTPServerTransport
  ListToolsRequestSchema: typeof ListToolsRequestSchema
  CallToolRequestSchema: typeof CallToolRequestSchema
  ListResourcesRequestSchema: typeof ListResourcesRequestSchema
  ReadResourceRequestSchema: typeof ReadResourceRequestSchema
  ListPromptsRequestSchema: typeof ListPromptsRequestSchema
  GetPromptRequestSchema: typeof GetPromptRequestSchema
  McpError: typeof McpError
  ErrorCode: typeof ErrorCode
  /** One validator for every per-request Server (each would otherwise build its own Ajv). */
  validator: AjvJsonSchemaValidator
}

let loading: Promise<McpSdk> | undefined

/**
 * The SDK, imported on the first `/mcp` request: it takes about half a second to load, which a
 * server nobody calls through MCP should not pay at start.
 */
export function loadMcpSdk(): Promise<McpSdk> {
  loading ??= (async () => {
    const [server, http, types, ajv] = await Promise.all([
      import('@modelcontextprotocol/sdk/server/index.js'),
      import('@modelcontextprotocol/sdk/server/streamableHttp.js'),
      import('@modelcontextprotocol/sdk/types.js'),
      import('@modelcontextprotocol/sdk/validation/ajv-provider.js'),
    ])
    return {
      Server: server.Server,
      StreamableHTTPServerTransport: http.StreamableHTTPServerTransport,
      ListToolsRequestSchema: types.ListToolsRequestSchema,
      CallToolRequestSchema: types.CallToolRequestSchema,
      ListResourcesRequestSchema: types.ListResourcesRequestSchema,
      ReadResourceRequestSchema: types.ReadResourceRequestSchema,
      ListPromptsRequestSchema: types.ListPromptsRequestSchema,
      GetPromptRequestSchema: types.GetPromptRequestSchema,
      McpError: types.McpError,
      ErrorCode: types.ErrorCode,
      validator: new ajv.AjvJsonSchemaValidator(),
    }
  })()
  loading.catch(() => (loading = undefined))
  return loading
}
