import type { Risk } from '../extension/index.js'

/** A command id segment (docs/mcp.md#names): lowercase snake, starting with a letter. */
export const segmentPattern = /^[a-z][a-z0-9]*(_[a-z0-9]+)*$/

/**
 * Maps a remote tool name onto a command segment: `get-env` → `get_env`, `getTinyImage` →
 * `get_tiny_image`. Null when nothing usable is left.
 */
export function toolSegment(remote: string): string | null {
  const snake = remote
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '')
  if (!snake) return null
  return /^[a-z]/.test(snake) ? snake : `t_${snake}`
}

/** What MCP says of a tool's behaviour (all hints; a server may lie, so the operator can override). */
export interface ToolAnnotations {
  readOnlyHint?: boolean
  destructiveHint?: boolean
  idempotentHint?: boolean
  openWorldHint?: boolean
}

/** Read-only → low, destructive → high, otherwise medium (docs/mcp.md, "Risk"). */
export function riskFromAnnotations(annotations: ToolAnnotations | undefined): Risk {
  if (annotations?.readOnlyHint === true) return 'low'
  if (annotations?.destructiveHint === true) return 'high'
  return 'medium'
}

/** `$schema` names a draft the validator may not know; the schema itself is what matters. */
export function withoutMetaSchema(schema: { [key: string]: unknown }): { [key: string]: unknown } {
  const rest = { ...schema }
  delete rest.$schema
  // An `$id` would be registered by the validator and refuse the next mount of the same tool.
  delete rest.$id
  return rest
}
