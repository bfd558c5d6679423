import type { CommandBus, RegisteredCommand } from '../cmdbus/index.js'
import type { JsonValue, Risk } from '../extension/index.js'
import { projectToolSchema, type ModelTool } from '../llm/index.js'
import type { Run } from '../store/index.js'

/** What a tool name the model may call stands for. */
export type ToolEntry =
  { kind: 'command'; command: RegisteredCommand; tool: ModelTool } | { kind: 'client'; tool: ModelTool }

/**
 * Exposed commands the agent (or, with `entrance: 'mcp'`, an MCP client) may call — the project's
 * subset, when it sets one — with their tool names.
 */
export function* commandTools(
  bus: CommandBus,
  subset: string[] | null,
  entrance: 'agent' | 'mcp' = 'agent',
): Generator<{ toolName: string; commandId: string; command: RegisteredCommand }> {
  const allowed = subset === null ? null : new Set(subset)
  for (const command of bus.catalog.list()) {
    const toolName = command.toolName
    if (!toolName) continue
    if (allowed && !allowed.has(command.spec.id)) continue
    if (command.spec.entrances && !command.spec.entrances.includes(entrance)) continue
    // Exec tools where nothing can run (no sandbox, and `direct` not chosen) are not offered.
    if (command.availableWhen && !command.availableWhen()) continue
    yield { toolName, commandId: command.spec.id, command }
  }
}

/**
 * The model's tools: exposed commands plus the run's client tools. An owner who may only read the
 * project (shared read-only) is offered the read-only commands alone: the others would be refused.
 */
export function toolTable(bus: CommandBus, run: Run, writable = true): Map<string, ToolEntry> {
  const table = new Map<string, ToolEntry>()
  for (const { command, toolName } of commandTools(bus, run.profile.tools)) {
    if (!writable && !command.spec.idempotent) continue
    table.set(toolName, { kind: 'command', command, tool: modelTool(command, toolName) })
  }
  for (const tool of (run.clientTools as unknown as ModelTool[]) ?? []) table.set(tool.name, { kind: 'client', tool })
  return table
}

/** Each command's tool as last projected, with what it was projected from. */
const projectedTools = new WeakMap<RegisteredCommand, { from: [string, unknown, string]; tool: ModelTool }>()

/**
 * A command's tool for the model: providers get a projection of its schema (the command's own schema
 * is still enforced on dispatch). Projected once per command, not every round: the same tool object
 * (read-only) while its name, schema and description stay the same.
 */
function modelTool(command: RegisteredCommand, toolName: string): ModelTool {
  const { paramsSchema, description } = command.spec
  const known = projectedTools.get(command)
  if (known && known.from[0] === toolName && known.from[1] === paramsSchema && known.from[2] === description)
    return known.tool
  const projected = projectToolSchema(paramsSchema)
  const tool: ModelTool = {
    name: toolName,
    description: projected.descriptionSuffix ? `${description}\n\n${projected.descriptionSuffix}` : description,
    parameters: projected.parameters,
  }
  projectedTools.set(command, { from: [toolName, paramsSchema, description], tool })
  return tool
}

/** Arguments are JSON text; a JSON string holding JSON (double encoding) is unwrapped once. */
export function parseArguments(raw: string): { value: JsonValue | null; error?: string } {
  if (raw.trim() === '') return { value: {} }
  try {
    let value = JSON.parse(raw) as JsonValue
    if (typeof value === 'string') {
      try {
        value = JSON.parse(value) as JsonValue
      } catch {
        return { value: null, error: 'a JSON string that does not hold a JSON object' }
      }
    }
    // As deep as a request body may be: deeper would not even serialise for storage.
    if (deeperThan(value, maxArgumentDepth))
      return { value: null, error: `nested deeper than ${maxArgumentDepth} levels` }
    return { value }
  } catch (error) {
    return { value: null, error: (error as Error).message }
  }
}

const maxArgumentDepth = 64

/** Whether `value` nests objects or arrays more than `limit` levels deep (walked without recursion). */
function deeperThan(value: JsonValue, limit: number): boolean {
  const stack: Array<[JsonValue, number]> = [[value, 0]]
  for (let next = stack.pop(); next; next = stack.pop()) {
    const [current, depth] = next
    if (current === null || typeof current !== 'object') continue
    if (depth >= limit) return true
    for (const child of Array.isArray(current) ? current : Object.values(current)) stack.push([child, depth + 1])
  }
  return false
}

/** The call's risk as the gate will evaluate it (a classifier run on these args): what clients are shown. */
export async function commandRisk(
  bus: CommandBus,
  run: Run,
  entry: ToolEntry | undefined,
  args: JsonValue | null,
): Promise<Risk | null> {
  if (entry?.kind !== 'command' || args === null || typeof args !== 'object' || Array.isArray(args)) return null
  return bus.assessRisk({
    commandId: entry.command.spec.id,
    params: args,
    entrance: 'agent',
    actor: { type: 'agent', id: run.id, onBehalfOf: run.ownerId },
    projectId: run.projectId,
    conversationId: run.conversationId,
    runId: run.id,
  })
}
