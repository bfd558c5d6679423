import { appendAuditEntry, type AgentProfile, type Executor, type JsonValue, type Project } from '../store/index.js'
import { HttpProblem } from './problem.js'
import type { ServerDeps } from './server-deps.js'

type ProfileInput = Partial<AgentProfile> & { runtimes?: string[] }

const profileKeys = ['systemPrompt', 'defaultModel', 'modelParams', 'tools'] as const

/**
 * Checks what the schema cannot: the default model is configured, every tool names an exposed command
 * (by id or tool name; stored as command ids), every runtime is declared. Throws a problem naming the
 * field; returns the input with tools as command ids.
 */
export function checkProfile<T extends ProfileInput>(deps: ServerDeps, input: T): T {
  if (typeof input.defaultModel === 'string' && !deps.runs.models.get(input.defaultModel)) {
    throw new HttpProblem('unknown_model', `body.defaultModel: no model ${JSON.stringify(input.defaultModel)}; GET /api/models lists them`)
  }
  const unknownRuntimes = (input.runtimes ?? []).filter((name) => !Object.hasOwn(deps.exec.settings.runtimes, name))
  if (unknownRuntimes.length > 0) {
    const known = Object.keys(deps.exec.settings.runtimes)
    throw new HttpProblem('validation_failed', `body.runtimes: unknown runtime ${unknownRuntimes.join(', ')} (the operator declares them in exec.runtimes${known.length > 0 ? `: ${known.join(', ')}` : '; none are declared'})`, {
      errors: [{ path: 'body.runtimes', message: `unknown runtime ${unknownRuntimes.join(', ')}` }],
    })
  }
  if (!input.tools) return input
  const exposed = deps.bus.catalog.list().filter((command) => command.toolName && (!command.spec.entrances || command.spec.entrances.includes('agent')))
  const errors: Array<{ path: string; message: string }> = []
  const ids = input.tools.map((name, index) => {
    const command = exposed.find((candidate) => candidate.spec.id === name || candidate.toolName === name)
    if (!command) errors.push({ path: `body.tools.${index}`, message: `unknown tool ${JSON.stringify(name)}` })
    return command?.spec.id ?? name
  })
  if (errors.length > 0) {
    throw new HttpProblem('validation_failed', `${errors.map((error) => `${error.path}: ${error.message}`).join('; ')} (GET /api/commands lists the commands; those with exposeAsTool are tools)`, { errors })
  }
  return { ...input, tools: [...new Set(ids)] }
}

/** Appends a profile change to the audit log (hash-chained with every dispatch) when one was made. */
export async function auditProfileChange(tx: Executor, before: Project, after: Project, by: string): Promise<void> {
  const changes: { [key: string]: JsonValue } = {}
  for (const key of profileKeys) {
    if (JSON.stringify(before[key]) !== JSON.stringify(after[key])) changes[key] = { from: before[key] as JsonValue, to: after[key] as JsonValue }
  }
  if (Object.keys(changes).length === 0) return
  await appendAuditEntry(tx, {
    dispatchId: null,
    step: 'project:profile',
    ownerId: before.ownerId,
    projectId: before.id,
    conversationId: null,
    commandId: null,
    entrance: null,
    envelope: { projectId: before.id, by, changes },
  })
}
