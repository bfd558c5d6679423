import type { Message, RunAgentInput, Tool } from '@ag-ui/core'
import { RunAgentInputSchema } from '@ag-ui/core/schemas'
import { HttpProblem } from '../problem.js'
import { toolSchemaProblem } from '../../runmgr/index.js'

const maxReportedIssues = 20
const toolName = /^[a-zA-Z][a-zA-Z0-9_]{0,63}$/

/** The body checked in depth against AG-UI's own validator: a mistake is 400 `validation_failed` naming the field. */
export function parseRunAgentInput(body: unknown): RunAgentInput {
  const parsed = RunAgentInputSchema.safeParse(body)
  if (parsed.success) return parsed.data as RunAgentInput
  const errors = parsed.error.issues
    .slice(0, maxReportedIssues)
    .map((issue) => ({ path: ['body', ...issue.path.map(String)].join('.'), message: issue.message }))
  throw new HttpProblem('validation_failed', errors.map((error) => `${error.path}: ${error.message}`).join('; '), {
    errors,
  })
}

/** The text of a user message; Plinth runs take text, so any other part is 400 `unsupported_content`. */
export function userText(message: Message, index: number): string {
  if (message.role !== 'user') throw new Error('not a user message')
  const { content } = message
  if (typeof content === 'string') return nonEmpty(content, index)
  const other = content.find((part) => part.type !== 'text')
  if (other)
    throw new HttpProblem(
      'unsupported_content',
      `messages[${index}] has a ${other.type} part; Plinth runs take text only`,
    )
  return nonEmpty(content.map((part) => (part.type === 'text' ? part.text : '')).join(''), index)
}

function nonEmpty(text: string, index: number): string {
  if (text.trim() === '')
    throw new HttpProblem('validation_failed', `messages[${index}]: the user message is empty`, {
      errors: [{ path: `body.messages.${index}.content`, message: 'must not be empty' }],
    })
  return text
}

/** AG-UI frontend tools as Plinth client tools (`{name, description, parameters}`). */
export function clientToolsOf(
  tools: readonly Tool[],
): Array<{ name: string; description: string; parameters: Record<string, unknown> }> {
  const seen = new Set<string>()
  return tools.map((tool, index) => {
    const fail = (field: string, message: string): never => {
      throw new HttpProblem('invalid_tool', `tools[${index}].${field} ${message}`, {
        errors: [{ path: `body.tools.${index}.${field}`, message }],
      })
    }
    if (!toolName.test(tool.name)) fail('name', `must match ${toolName.source}`)
    if (seen.has(tool.name)) fail('name', `repeats the tool ${JSON.stringify(tool.name)}`)
    seen.add(tool.name)
    const parameters = (tool.parameters ?? { type: 'object', properties: {} }) as Record<string, unknown>
    const problem = toolSchemaProblem(parameters)
    if (problem) fail('parameters', problem)
    return { name: tool.name, description: tool.description, parameters }
  })
}

/** The name of the call a tool message answers, from the assistant messages of the input. */
export function callNameIn(messages: readonly Message[], toolCallId: string): string | undefined {
  for (const message of messages) {
    if (message.role !== 'assistant') continue
    const call = message.toolCalls?.find((candidate) => candidate.id === toolCallId)
    if (call) return call.function.name
  }
  return undefined
}
