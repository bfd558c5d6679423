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
  /** Whether a value is a JSON-RPC message at all (request, notification, answer). */
  isMessage: (value: unknown) => boolean
  /**
   * Why a request's params do not fit its method's schema (`params.name: …`), or undefined. The SDK
   * parses them itself, but answers a misfit as an internal error carrying the whole validation dump.
   */
  paramsProblem: (message: { method: string }) => string | undefined
  /** One validator for every per-request Server (each would otherwise build its own Ajv). */
  validator: AjvJsonSchemaValidator
}

type SafeParse =
  | { success: true }
  | { success: false; error: { issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }> } }

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
      isMessage: (value: unknown) => types.JSONRPCMessageSchema.safeParse(value).success,
      paramsProblem: (message: { method: string }) => {
        const schemas: Record<string, { safeParse: (value: unknown) => SafeParse }> = {
          initialize: types.InitializeRequestSchema,
          'tools/list': types.ListToolsRequestSchema,
          'tools/call': types.CallToolRequestSchema,
          'resources/list': types.ListResourcesRequestSchema,
          'resources/read': types.ReadResourceRequestSchema,
          'prompts/list': types.ListPromptsRequestSchema,
          'prompts/get': types.GetPromptRequestSchema,
        }
        const parsed = schemas[message.method]?.safeParse(message)
        const issue = parsed && !parsed.success ? parsed.error.issues[0] : undefined
        if (!issue) return undefined
        return `${issue.path.map(String).join('.') || 'params'}: ${issue.message}`.replace(/\s+/g, ' ')
      },
      validator: new ajv.AjvJsonSchemaValidator(),
    }
  })()
  loading.catch(() => (loading = undefined))
  return loading
}
