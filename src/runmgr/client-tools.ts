import type { ModelTool } from '../llm/index.js'
import { RunRequestError } from './run-errors.js'

/** The built-in client tool: the client runs a command line in the user's terminal, after showing it. */
export const proposeCommandTool: ModelTool = {
  name: 'propose_command',
  description:
    'Propose a shell command for the user to run in their own terminal. The user sees it (with a risk warning) and decides; you get {accepted: true} or {accepted: false}.',
  parameters: {
    type: 'object',
    properties: {
      command: { type: 'string', description: 'The command line' },
      reason: { type: 'string', description: 'Why it helps' },
    },
    required: ['command'],
    additionalProperties: false,
  },
}

const namePattern = /^[a-zA-Z][a-zA-Z0-9_]{0,63}$/

/** Validates a run's `clientTools`: built-in names, or `{name, description, parameters}` objects. */
export function resolveClientTools(input: unknown): ModelTool[] {
  if (input === undefined || input === null) return []
  if (!Array.isArray(input)) throw new RunRequestError('validation_failed', 'clientTools must be an array')
  return input.map((entry, index) => {
    if (entry === 'propose_command') return proposeCommandTool
    if (typeof entry === 'string')
      throw new RunRequestError(
        'validation_failed',
        `clientTools[${index}]: unknown built-in client tool ${JSON.stringify(entry)}`,
      )
    const tool = entry as Partial<ModelTool>
    if (!tool || typeof tool.name !== 'string' || !namePattern.test(tool.name)) {
      throw new RunRequestError('validation_failed', `clientTools[${index}].name must match ${namePattern.source}`)
    }
    if (
      !tool.parameters ||
      typeof tool.parameters !== 'object' ||
      (tool.parameters as { type?: unknown }).type !== 'object'
    ) {
      throw new RunRequestError(
        'validation_failed',
        `clientTools[${index}].parameters must be a JSON Schema with type "object"`,
      )
    }
    return {
      name: tool.name,
      description: typeof tool.description === 'string' ? tool.description : '',
      parameters: tool.parameters,
    }
  })
}
