import { Ajv, type ValidateFunction } from 'ajv'
import { CommandError, projectToolName, type CommandContext, type JsonValue, type Risk } from '../extension/index.js'
import type { ContextOptions } from './context.js'
import type { Harness } from './harness.js'
import { copy } from './memory-kv.js'
import type { CollectedCommand } from './test-registry.js'

type Params = { [key: string]: JsonValue }

/** A tool as the model is offered it: the projected name, the command's description and params schema. */
export interface OfferedTool {
  name: string
  commandId: string
  description: string
  parameters: JsonValue
  risk: Risk | 'varies'
}

/** One call a scripted turn makes: a tool name and its arguments (an object, or JSON text as a model streams it). */
export interface ScriptedCall {
  name: string
  arguments?: JsonValue | string
}

/** One model turn: text, and the tools it calls (none: the turn is the answer). */
export interface ScriptedTurn {
  text?: string
  toolCalls?: ScriptedCall[]
}

/** What became of one call, as the model reads it next turn. */
export interface AgentStep {
  name: string
  commandId: string | null
  args: JsonValue | null
  status: 'ok' | 'error' | 'rejected'
  output: JsonValue
  /** The risk that applied and whether a person was asked. */
  risk: Risk | null
  asked: boolean
  /** What the handler threw, for a failure that is not a CommandError (the model only reads command_failed). */
  thrown?: unknown
}

export interface ScriptedAgentOptions extends ContextOptions {
  /** Answers the human-in-the-loop question for medium and high risk and `confirm` commands (default: approve). */
  approve?: (step: {
    name: string
    commandId: string
    args: Params
    risk: Risk
    preview: string | null
  }) => boolean | Promise<boolean>
}

export interface ScriptedAgentResult {
  steps: AgentStep[]
  /** The text of the last turn without tool calls, if there was one. */
  answer: string | null
  tools: OfferedTool[]
}

/** The plugin's commands a model is offered: `exposeAsTool`, and the agent entrance allowed. */
export function offeredTools(harness: Harness): OfferedTool[] {
  return [...harness.registry.commands.values()]
    .filter(({ spec }) => spec.exposeAsTool && (!spec.entrances || spec.entrances.includes('agent')))
    .map(({ spec }) => ({
      name: spec.exposeAsTool?.name ?? projectToolName(spec.id),
      commandId: spec.id,
      description: spec.description,
      parameters: spec.paramsSchema as JsonValue,
      risk: spec.exposeAsTool?.risk ?? (typeof spec.risk === 'string' ? spec.risk : 'varies'),
    }))
}

/**
 * Plays scripted model turns against the plugin the way Plinth's agent loop runs tool calls: the tool is
 * looked up by its projected name, the arguments are parsed and validated against the command's params
 * schema, medium/high risk and `confirm` calls ask `approve`, and the handler runs as the agent on behalf
 * of the user. Mistakes become results the model reads (`unknown_tool`, `invalid_arguments`,
 * `invalid_params`, a CommandError's code, `command_failed`), never exceptions.
 *
 * @example
 * const harness = await setupPlugin(plugin)
 * const { steps } = await runScriptedAgent(harness, [{ toolCalls: [{ name: 'hello__greet', arguments: { name: 'Ada' } }] }, { text: 'Done.' }])
 * expect(steps[0]).toMatchObject({ status: 'ok', output: { greeting: 'hello Ada' } })
 */
export async function runScriptedAgent(
  harness: Harness,
  turns: readonly ScriptedTurn[],
  options: ScriptedAgentOptions = {},
): Promise<ScriptedAgentResult> {
  const { approve = () => true, ...contextOptions } = options
  const tools = offeredTools(harness)
  const ajv = new Ajv({ allErrors: true, strict: false })
  const validators = new Map<string, ValidateFunction>()
  const base = harness.context(contextOptions)
  const runId = 'run_scripted'
  const agentContext: CommandContext = {
    ...base,
    actor: { type: 'agent', id: runId, onBehalfOf: base.actor.onBehalfOf },
    entrance: 'agent',
    runId,
  }
  const steps: AgentStep[] = []
  let answer: string | null = null
  for (const turn of turns) {
    if (!turn.toolCalls || turn.toolCalls.length === 0) {
      answer = turn.text ?? ''
      continue
    }
    for (const call of turn.toolCalls) steps.push(await runCall(call))
  }
  return { steps, answer, tools }

  async function runCall(call: ScriptedCall): Promise<AgentStep> {
    const step = (fields: Partial<AgentStep> & Pick<AgentStep, 'status' | 'output'>): AgentStep => ({
      name: call.name,
      commandId: null,
      args: null,
      risk: null,
      asked: false,
      ...fields,
    })
    const tool = tools.find((candidate) => candidate.name === call.name)
    if (!tool)
      return step({
        status: 'error',
        output: { error: { code: 'unknown_tool', message: `there is no tool named ${call.name}` } },
      })
    const command = harness.registry.command(tool.commandId)
    let args: JsonValue
    try {
      args =
        typeof call.arguments === 'string' ? (JSON.parse(call.arguments || '{}') as JsonValue) : (call.arguments ?? {})
    } catch (error) {
      return step({
        commandId: tool.commandId,
        status: 'error',
        output: { error: { code: 'invalid_arguments', message: (error as Error).message } },
      })
    }
    const validate = validators.get(tool.commandId) ?? ajv.compile(command.spec.paramsSchema as object)
    validators.set(tool.commandId, validate)
    if (args === null || typeof args !== 'object' || Array.isArray(args) || !validate(args)) {
      const errors = (validate.errors ?? []).map((error) => ({
        path: error.instancePath || '/',
        message: error.message ?? 'invalid',
      }))
      return step({
        commandId: tool.commandId,
        args,
        status: 'error',
        output: { error: { code: 'invalid_params', message: 'the arguments do not match the parameters', errors } },
      })
    }
    const params = args as Params
    const risk = riskOf(command, params, agentContext)
    const asked = risk !== 'low' || command.spec.confirm === true
    if (asked) {
      const preview = command.spec.preview ? await command.spec.preview(params, agentContext) : null
      if (!(await approve({ name: call.name, commandId: tool.commandId, args: params, risk, preview }))) {
        return step({
          commandId: tool.commandId,
          args,
          risk,
          asked,
          status: 'rejected',
          output: { accepted: false, rejected: true },
        })
      }
    }
    try {
      const output = copy((await command.handler(params, agentContext)) ?? null)
      return step({ commandId: tool.commandId, args, risk, asked, status: 'ok', output })
    } catch (error) {
      if (error instanceof CommandError || (error as { name?: unknown })?.name === 'CommandError') {
        const { code, message } = error as CommandError
        return step({
          commandId: tool.commandId,
          args,
          risk,
          asked,
          status: 'error',
          output: { error: { code, message } },
        })
      }
      return step({
        commandId: tool.commandId,
        args,
        risk,
        asked,
        status: 'error',
        output: { error: { code: 'command_failed', message: 'the command failed' } },
        thrown: error,
      })
    }
  }
}

function riskOf(command: CollectedCommand, params: Params, context: CommandContext): Risk {
  const { spec } = command
  if (spec.exposeAsTool?.risk) return spec.exposeAsTool.risk
  return typeof spec.risk === 'function' ? spec.risk(params, context) : spec.risk
}
