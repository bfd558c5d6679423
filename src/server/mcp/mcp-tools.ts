import type { Tool, ToolAnnotations } from '@modelcontextprotocol/sdk/types.js'
import { catalogRisk, type CommandBus, type RegisteredCommand } from '../../cmdbus/index.js'
import { projectToolSchema } from '../../llm/index.js'
import { commandTools } from '../../runmgr/index.js'
import type { Project, User } from '../../store/index.js'

/** What one `/mcp` request acts on, resolved from its URL and the caller's token. */
export interface McpScope {
  userId: string
  user: User
  /** The project of `/mcp/projects/:projectId`, as the caller may see it. */
  project: Project | null
  /** `/mcp/projects/:projectId`; null on `/mcp`. */
  projectId: string | null
  conversationId: string | null
  /** The project profile's tool subset (command ids), or null: every exposed command. */
  subset: string[] | null
  /** False in a project the caller may only read: its read-only (idempotent) commands alone, as a run there gets. */
  writable: boolean
}

/**
 * The tools an MCP client is offered in `scope`, by tool name in code-unit order (stable across
 * instances and restarts): commands exposed as tools whose entrances allow `mcp` and that can work
 * now, narrowed to the project's subset.
 */
export function offeredCommands(
  bus: CommandBus,
  scope: McpScope,
): Array<{ toolName: string; command: RegisteredCommand }> {
  const offered = [...commandTools(bus, scope.subset, 'mcp')].filter(
    ({ command }) =>
      (scope.writable || command.spec.idempotent === true) &&
      // Work-directory tools only where there is a work directory (`/mcp/projects/:p/conversations/:c`).
      (scope.conversationId !== null || command.needsConversation !== true),
  )
  return offered.sort((a, b) => (a.toolName < b.toolName ? -1 : a.toolName > b.toolName ? 1 : 0))
}

/** The offered command of this tool name, or undefined (unknown, or not offered in this scope). */
export function offeredCommand(bus: CommandBus, scope: McpScope, toolName: string): RegisteredCommand | undefined {
  const command = bus.catalog.byToolName(toolName)
  if (!command) return undefined
  return offeredCommands(bus, scope).some((entry) => entry.command === command) ? command : undefined
}

// A command's spec does not change once registered: its tool is built once.
const described = new WeakMap<RegisteredCommand, Tool>()

/**
 * A command as an MCP tool: the name, schema projection and description the model of a run gets
 * (so any client's model can use it), its title, and hints from its catalog risk.
 */
export function describeTool(command: RegisteredCommand): Tool {
  let tool = described.get(command)
  if (tool) return tool
  const projected = projectToolSchema(command.spec.paramsSchema)
  const { risk } = catalogRisk(command)
  tool = {
    name: command.toolName!,
    title: command.spec.title,
    description: projected.descriptionSuffix
      ? `${command.spec.description}\n\n${projected.descriptionSuffix}`
      : command.spec.description,
    inputSchema: projected.parameters as Tool['inputSchema'],
    annotations: toolAnnotations(command),
    _meta: { 'plinth/commandId': command.spec.id, 'plinth/risk': risk },
  }
  described.set(command, tool)
  return tool
}

/**
 * Hints from the catalog risk: low is read-only, high destructive; medium is neither. A risk that
 * varies per call claims nothing about destruction (clients then assume it may be destructive).
 */
export function toolAnnotations(command: RegisteredCommand): ToolAnnotations {
  const { risk } = catalogRisk(command)
  const hints: ToolAnnotations =
    risk === 'low'
      ? { readOnlyHint: true, destructiveHint: false }
      : risk === 'high'
        ? { readOnlyHint: false, destructiveHint: true }
        : risk === 'medium'
          ? { readOnlyHint: false, destructiveHint: false }
          : { readOnlyHint: false }
  if (command.spec.idempotent === true) hints.idempotentHint = true
  return hints
}
