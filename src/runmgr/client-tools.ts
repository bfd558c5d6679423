import { Ajv } from 'ajv'
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

// Checks schemas against the JSON Schema meta-schema only (unknown keywords pass, as providers allow).
const metaSchema = new Ajv({ strict: false, validateSchema: true, allErrors: true, logger: false })
// What older drafts and OpenAPI 3.0 write differently, and providers take: boolean exclusive bounds
// (draft-04), an empty enum.
const tolerated = /\/(exclusiveMinimum|exclusiveMaximum|enum)$/

/**
 * What is wrong with a client tool's `parameters`, or undefined: an object schema that is itself valid
 * JSON Schema (`{"type": "nonsense"}` anywhere in it is refused here rather than by the provider).
 */
export function toolSchemaProblem(parameters: unknown): string | undefined {
  if (!parameters || typeof parameters !== 'object' || Array.isArray(parameters)) return 'must be a JSON Schema object'
  if ((parameters as { type?: unknown }).type !== 'object') return 'must be a JSON Schema with type "object"'
  // Checked against draft-07's meta-schema whatever `$schema` names (zod emits 2020-12's; a draft Ajv
  // does not hold would be refused outright): the keywords that matter read the same in both.
  const schema = { ...(parameters as { [key: string]: unknown }) }
  delete schema.$schema
  if (metaSchema.validateSchema(schema) === true) return undefined
  const first = metaSchema.errors?.find((error) => !tolerated.test(error.instancePath))
  if (!first) return undefined
  return `is not valid JSON Schema${first ? `: ${first.instancePath || '/'} ${first.message ?? ''}`.trimEnd() : ''}`
}

/** A `validation_failed` naming the field (`body.clientTools.0.name`), in `errors` as every other one. */
function invalid(path: string, message: string): RunRequestError {
  return new RunRequestError('validation_failed', `${path}: ${message}`, { errors: [{ path, message }] })
}

/** Validates a run's `clientTools`: built-in names, or `{name, description, parameters}` objects. */
export function resolveClientTools(input: unknown): ModelTool[] {
  if (input === undefined || input === null) return []
  if (!Array.isArray(input)) throw invalid('body.clientTools', 'must be an array')
  return input.map((entry, index) => {
    const at = `body.clientTools.${index}`
    if (entry === 'propose_command') return proposeCommandTool
    if (typeof entry === 'string') throw invalid(at, `unknown built-in client tool ${JSON.stringify(entry)}`)
    const tool = entry as Partial<ModelTool>
    if (!tool || typeof tool.name !== 'string' || !namePattern.test(tool.name))
      throw invalid(`${at}.name`, `must match ${namePattern.source}`)
    const problem = toolSchemaProblem(tool.parameters)
    if (problem) throw invalid(`${at}.parameters`, problem)
    return {
      name: tool.name,
      description: typeof tool.description === 'string' ? tool.description : '',
      parameters: tool.parameters as ModelTool['parameters'],
    }
  })
}
