import {
  CommandError,
  type CliToolSpec,
  type CommandContext,
  type JsonValue,
  type PluginLogger,
  type Risk,
} from '../extension/index.js'
import {
  cliEnvironment,
  execCommandTimeoutMs,
  fitExecResult,
  gateCliCall,
  PathError,
  probeCliVersion,
  QuotaError,
  ExecBusyError,
  SandboxUnavailableError,
  type ExecResult,
  type ExecService,
} from '../exec/index.js'
import type { Store } from '../store/index.js'
import type { CommandCatalog, CoreContext } from './command-catalog.js'
import type { Params } from './bus-types.js'
import { resultImages, writtenImages } from './exec-images.js'
import { classifyCommandLine } from './risk-rules.js'

/** What the model reads of an execution (docs/guides/sandbox.md), before the output cap. */
export function execModelText(result: JsonValue): string {
  const value = result as Partial<ExecResult> | null
  if (!value || typeof value !== 'object' || !('stdout' in value)) return JSON.stringify(result)
  const status = value.timedOut
    ? `timeout (killed after ${value.durationMs}ms)`
    : value.signal
      ? `signal ${value.signal}`
      : String(value.exitCode)
  const images = resultImages(result)
    .map((image) => `${image.path} (${image.mediaType}, ${image.width}×${image.height})`)
    .join(', ')
  return `exitCode=${status}\nduration=${value.durationMs}ms\nstdout:\n${value.stdout ?? ''}\n\nstderr:\n${value.stderr ?? ''}${value.truncated ? '\n[output truncated]' : ''}${images ? `\nimages written: ${images}` : ''}`
}

/** Streams an execution's output as `tool_call.output` events, coalesced (≈ 50 ms or 4 KiB). */
class OutputEvents {
  readonly #store: Store
  readonly #context: CoreContext
  #pending: Array<{ stream: 'stdout' | 'stderr'; text: string }> = []
  #size = 0
  #timer: NodeJS.Timeout | null = null
  #writing: Promise<unknown> = Promise.resolve()

  constructor(store: Store, context: CoreContext) {
    this.#store = store
    this.#context = context
  }

  push(stream: 'stdout' | 'stderr', text: string): void {
    const last = this.#pending.at(-1)
    if (last?.stream === stream) last.text += text
    else this.#pending.push({ stream, text })
    this.#size += text.length
    if (this.#size >= 4096) this.flush()
    else this.#timer ??= setTimeout(() => this.flush(), 50)
  }

  flush(): void {
    if (this.#timer) clearTimeout(this.#timer)
    this.#timer = null
    if (this.#pending.length === 0) return
    const batch = this.#pending
    this.#pending = []
    this.#size = 0
    const context = this.#context
    this.#writing = this.#writing.then(() =>
      this.#store
        .appendEvents(
          batch.map((part) => ({
            type: 'tool_call.output',
            projectId: context.project?.id ?? null,
            conversationId: context.conversationId,
            runId: context.runId,
            userId: context.actor.onBehalfOf,
            data: { callId: context.callId, dispatchId: context.dispatchId, stream: part.stream, text: part.text },
          })),
        )
        .catch(() => undefined),
    )
  }

  async close(): Promise<void> {
    this.flush()
    await this.#writing
  }
}

export interface ExecCommandDeps {
  store: Store
  exec: ExecService
  version: string
  log: PluginLogger
  /** Operator high-risk keywords (PLINTH_HIGH_RISK_KEYWORDS), on top of the built-in rules. */
  highRiskKeywords?: readonly string[]
  /** The bus's result cap (PLINTH_RESULT_MAX_BYTES): an execution's result is cut to fit it. */
  resultMaxBytes: number
}

function requireConversation(context: CommandContext, command: string): string {
  if (!context.conversationId)
    throw new CommandError(
      'conversation_required',
      `${command} runs in a conversation's work directory: dispatch it with a conversationId`,
    )
  return context.conversationId
}

/** Runs argv for a command, streaming its output; refusals of the sandbox become a readable error. */
async function execute(
  deps: ExecCommandDeps,
  context: CommandContext,
  argv: string[],
  input: { stdin?: string; env?: Record<string, string> } = {},
): Promise<JsonValue> {
  const conversationId = requireConversation(context, 'this command')
  const events = new OutputEvents(deps.store, context as CoreContext)
  const started = Date.now()
  try {
    const result = await deps.exec.run(
      {
        conversationId,
        projectId: context.project?.id ?? null,
        ownerId: context.actor.onBehalfOf,
        argv,
        ...(input.stdin !== undefined && { stdin: input.stdin }),
        ...(input.env && { env: input.env }),
      },
      { signal: context.signal, onOutput: (stream, text) => events.push(stream, text) },
    )
    // Stopped by the cancel (or the deadline): what it printed is not a result.
    if (context.signal.aborted) throw new Error('stopped by its signal')
    // The head of each stream, not a `result_too_large` with nothing kept.
    const fitted = fitExecResult(result, deps.resultMaxBytes) as unknown as { [key: string]: JsonValue }
    // Images it wrote (a plot): named in the result, shown in the console, sent to vision models.
    const images = await writtenImages(deps.exec.workdirs, conversationId, started)
    return images.length > 0 ? { ...fitted, images: images as unknown as JsonValue } : fitted
  } catch (error) {
    if (error instanceof SandboxUnavailableError) throw new CommandError('sandbox_unavailable', error.message)
    if (error instanceof QuotaError) throw new CommandError('quota_exceeded', error.message)
    if (error instanceof ExecBusyError) throw new CommandError('too_many_executions', error.message)
    throw error
  } finally {
    await events.close()
  }
}

/** A dispatch refused before anyone is asked while nothing can run (the sandbox's probe failed). */
function unavailableExecution(exec: ExecService): { code: string; message: string } | null {
  return exec.executionAvailable
    ? null
    : { code: 'sandbox_unavailable', message: exec.sandboxUnavailable ?? 'the sandbox is unavailable' }
}

/** Under `direct`, the operator's designated approvers (a second person), if any. */
function directApprovers(exec: ExecService): readonly string[] | null {
  return exec.backendName === 'direct' && exec.settings.directApprovers.length > 0
    ? exec.settings.directApprovers
    : null
}

function backendNoteOf(exec: ExecService): string {
  return exec.backendName === 'direct' ? 'on the server itself (direct backend)' : 'in the bubblewrap sandbox'
}

function quotaError(error: unknown): never {
  if (error instanceof QuotaError) throw new CommandError('quota_exceeded', error.message)
  throw error
}

function pathError(error: unknown): never {
  if (error instanceof PathError) throw new CommandError(error.code, error.message)
  throw error
}

/**
 * The exec and file tools (docs/guides/sandbox.md), core commands through the same bus as everything else.
 * Under `direct` the exec tools are high risk and always confirmed; under `sandbox` they are medium
 * (high when a shell line matches the high-risk rules). `exec.disableExecTools` registers no exec tool
 * at all (the file tools stay: they run nothing).
 */
export function registerExecCommands(catalog: CommandCatalog, deps: ExecCommandDeps): void {
  const { exec } = deps
  const settings = exec.settings
  const staged = catalog.stage('core', deps.version)
  const registry = staged.registry
  const backendNote = (): string => backendNoteOf(exec)
  const shellRisk = (text: string): Risk =>
    exec.backendName === 'direct'
      ? 'high'
      : classifyCommandLine(text, deps.highRiskKeywords).risk === 'high'
        ? 'high'
        : 'medium'

  if (!settings.disableExecTools) {
    registry.addCommand<{ command: string }>(
      {
        id: 'core.exec',
        title: 'Run a shell command',
        description:
          'Runs a shell command line (bash) in the conversation’s work directory and returns its exit code, stdout and stderr. ' +
          'Files you create stay in the work directory. No network unless the operator allows it.',
        paramsSchema: {
          type: 'object',
          properties: {
            command: {
              type: 'string',
              minLength: 1,
              maxLength: 20_000,
              pattern: settings.allowMultiline ? '\\S' : '^[^\\n\\r]*\\S[^\\n\\r]*$',
              description: settings.allowMultiline
                ? 'A bash command line'
                : 'A bash command line, on one line: this server refuses newlines in exec (exec.allowMultiline); join commands with ; or &&, or use run_code',
            },
          },
          required: ['command'],
          additionalProperties: false,
        },
        risk: (params) => shellRisk(params.command),
        exposeAsTool: { name: 'exec' },
        timeoutMs: execCommandTimeoutMs(settings.timeoutMs),
        preview: (params) => {
          const rules = classifyCommandLine(params.command, deps.highRiskKeywords).matchedRules.map((rule) => rule.id)
          return `Run ${backendNote()}: ${params.command}${rules.length > 0 ? `\n(high-risk rules: ${rules.join(', ')})` : ''}`
        },
      },
      (params, context) => execute(deps, context, ['/bin/bash', '-c', params.command]),
    )

    const interpreters: Record<string, string[]> = {
      bash: ['/bin/bash', '-s'],
      python: ['python3', '-'],
      node: ['node', '-'],
    }
    registry.addCommand<{ language: 'bash' | 'python' | 'node'; code: string }>(
      {
        id: 'core.run_code',
        title: 'Run code',
        description:
          'Runs a bash, Python 3 or Node.js program (the code is given on stdin) in the conversation’s work directory and returns its exit code, stdout and stderr.',
        paramsSchema: {
          type: 'object',
          properties: {
            language: { enum: ['bash', 'python', 'node'] },
            code: {
              type: 'string',
              minLength: 1,
              maxLength: settings.maxCodeBytes,
              description: `The program (at most ${settings.maxCodeBytes} bytes)`,
            },
          },
          required: ['language', 'code'],
          additionalProperties: false,
        },
        risk: (params) =>
          params.language === 'bash' ? shellRisk(params.code) : exec.backendName === 'direct' ? 'high' : 'medium',
        exposeAsTool: { name: 'run_code' },
        timeoutMs: execCommandTimeoutMs(settings.timeoutMs),
        preview: (params) =>
          `Run ${params.language} ${backendNote()}:\n${params.code.slice(0, 2000)}${params.code.length > 2000 ? '\n…' : ''}`,
      },
      async (params, context) => {
        if (Buffer.byteLength(params.code) > settings.maxCodeBytes)
          throw new CommandError('code_too_large', `the code is over ${settings.maxCodeBytes} bytes`)
        return execute(deps, context, interpreters[params.language]!, { stdin: params.code })
      },
    )
  }

  registry.addCommand<{ path: string; offset?: number; limit?: number }>(
    {
      id: 'core.read_file',
      title: 'Read a file',
      description:
        'Reads a text file of the conversation’s work directory (relative path), a page at a time (offset/limit in bytes).',
      paramsSchema: {
        type: 'object',
        properties: {
          path: { type: 'string', minLength: 1, maxLength: 1024 },
          offset: { type: 'integer', minimum: 0 },
          limit: { type: 'integer', minimum: 1, maximum: 1024 * 1024 },
        },
        required: ['path'],
        additionalProperties: false,
      },
      risk: 'low',
      idempotent: true,
      exposeAsTool: { name: 'read_file' },
    },
    async (params, context) => {
      const conversationId = requireConversation(context, 'core.read_file')
      const offset = params.offset ?? 0
      const { bytes, size } = await exec.workdirs
        .read(conversationId, params.path, { offset, limit: params.limit ?? 64 * 1024 })
        .catch(pathError)
      return {
        path: params.path,
        offset,
        bytes: bytes.length,
        size,
        eof: offset + bytes.length >= size,
        content: bytes.toString('utf8'),
      }
    },
  )

  registry.addCommand<{ path: string; content: string }>(
    {
      id: 'core.write_file',
      title: 'Write a file',
      description:
        'Writes a text file in the conversation’s work directory (relative path; parent directories are created).',
      paramsSchema: {
        type: 'object',
        properties: {
          path: { type: 'string', minLength: 1, maxLength: 1024 },
          content: { type: 'string', maxLength: 1024 * 1024 },
        },
        required: ['path', 'content'],
        additionalProperties: false,
      },
      risk: 'medium',
      exposeAsTool: { name: 'write_file' },
      preview: (params) => `Write ${Buffer.byteLength(params.content)} bytes to ${params.path} in the work directory`,
    },
    async (params, context) => {
      const conversationId = requireConversation(context, 'core.write_file')
      const owner = context.actor.onBehalfOf
      const size = Buffer.byteLength(params.content)
      // A file replaced frees its own bytes: only the difference must fit.
      const replacing = await exec.workdirs.fileSize(conversationId, params.path).catch(pathError)
      // Counted before the write: concurrent writes cannot share the same room.
      const reservation = await exec.quota
        .reserve(conversationId, owner, size - (replacing ?? 0), replacing === null ? 1 : 0)
        .catch(quotaError)
      const written = await exec.workdirs.write(conversationId, params.path, params.content).catch(async (error) => {
        await exec.quota.release(reservation)
        return pathError(error)
      })
      await exec.quota.settle(reservation, written)
      return { path: written.path, size: written.size }
    },
  )

  // SPEC names the listing `core.list_directory`; the tool the model sees is `list_files`. Both ids
  // are the same command, so a client may call either (docs/guides/sandbox.md).
  for (const id of ['core.list_files', 'core.list_directory']) {
    registry.addCommand<{ path?: string; offset?: number; limit?: number }>(
      {
        id,
        title: 'List files',
        description:
          'Lists the conversation’s work directory (or a directory in it), recursively, sorted by path; at most `limit` entries (500) from `offset` (0). When `truncated`, list again from `nextOffset`.',
        paramsSchema: {
          type: 'object',
          properties: {
            path: { type: 'string', maxLength: 1024 },
            offset: { type: 'integer', minimum: 0, maximum: 1_000_000 },
            limit: { type: 'integer', minimum: 1, maximum: 500 },
          },
          additionalProperties: false,
        },
        risk: 'low',
        idempotent: true,
        ...(id === 'core.list_files' && { exposeAsTool: { name: 'list_files' } }),
      },
      async (params, context) => {
        const conversationId = requireConversation(context, id)
        const offset = params.offset ?? 0
        const limit = params.limit ?? 500
        // The walk is in path order every time, so an offset pages it.
        const entries = await exec.workdirs.list(conversationId, params.path ?? '', offset + limit + 1).catch(pathError)
        const page = entries.slice(offset, offset + limit)
        const truncated = entries.length > offset + limit
        return {
          entries: page as unknown as JsonValue,
          truncated,
          ...(truncated && { nextOffset: offset + limit }),
        }
      },
    )
  }
  staged.commit()
  // A path that leads out, or through a denied segment, is refused with the schema's checks.
  const pathPrecheck =
    (required: boolean) =>
    (params: Params): { code: string; message: string } | null => {
      const path = typeof params.path === 'string' ? params.path : ''
      try {
        if (exec.workdirs.segments(path).length === 0 && required)
          return { code: 'invalid_path', message: 'a file path is required' }
        return null
      } catch (error) {
        if (error instanceof PathError) return { code: error.code, message: error.message }
        throw error
      }
    }
  catalog.setCoreHooks('core.read_file', { needsConversation: true, precheck: pathPrecheck(true) })
  catalog.setCoreHooks('core.write_file', { needsConversation: true, precheck: pathPrecheck(true) })
  for (const id of ['core.list_files', 'core.list_directory'])
    catalog.setCoreHooks(id, { needsConversation: true, precheck: pathPrecheck(false) })

  catalog.setCoreHooks('core.exec', {
    rulesWhen: (params) =>
      typeof params.command === 'string' ? classifyCommandLine(params.command, deps.highRiskKeywords).matchedRules : [],
  })
  for (const id of ['core.exec', 'core.run_code']) {
    // Under direct a human approves every run, whatever the mode or allowances.
    catalog.setCoreHooks(id, {
      needsConversation: true,
      confirmWhen: () => exec.backendName === 'direct',
      modelText: execModelText,
      availableWhen: () => exec.executionAvailable,
      precheck: () => unavailableExecution(exec),
      approversWhen: () => directApprovers(exec),
      riskRangeWhen: () => (exec.backendName === 'direct' ? ['high', 'high'] : ['medium', 'high']),
    })
  }
}

/**
 * Offers allowlisted CLIs (config `exec.cliTools` and plugins' `addCliTool`) as tools `cli.<name>`:
 * each is probed first (missing or too old → not offered, one warning). A call outside the allowlist
 * is a result with exit code 126 and the reason in stderr, so the model can explain it.
 */
export async function registerCliTools(
  catalog: CommandCatalog,
  deps: ExecCommandDeps,
  tools: ReadonlyArray<{ plugin: string; pluginVersion: string; spec: CliToolSpec }>,
): Promise<void> {
  if (deps.exec.settings.disableExecTools) return
  for (const { plugin, pluginVersion, spec } of tools) {
    const probe = await probeCliVersion(spec)
    if (!probe.ok) {
      // The logger names its own plugin (exec): the tool's declarer goes under another key.
      deps.log.warn(`CLI tool ${spec.name} is not offered: ${probe.reason}`, { declaredBy: plugin, tool: spec.name })
      continue
    }
    const staged = catalog.stage(plugin, pluginVersion)
    try {
      staged.registry.addCommand<{ command: string; subargs?: string[] }>(
        {
          id: `cli.${spec.name}`,
          title: `${spec.name} (allowlisted CLI)`,
          description: `${spec.description}\nAllowed commands: ${describeCommands(spec)}. Call with {command, subargs}; only declared --flags are accepted.`,
          paramsSchema: {
            type: 'object',
            properties: {
              command: { type: 'string', maxLength: 256 },
              subargs: { type: 'array', items: { type: 'string', maxLength: 1024 }, maxItems: 64 },
            },
            required: ['command'],
            additionalProperties: false,
          },
          // Under direct a CLI runs on the server itself, in a directory anyone may fill: an execution.
          risk: () => (deps.exec.backendName === 'direct' ? 'high' : (spec.risk ?? 'low')),
          exposeAsTool: { name: spec.name },
          timeoutMs: execCommandTimeoutMs(deps.exec.settings.timeoutMs),
          preview: (params) =>
            `Run ${spec.name} ${backendNoteOf(deps.exec)}: ${[params.command, ...(params.subargs ?? [])].join(' ')}`,
        },
        async (params, context) => {
          const gate = gateCliCall(spec, params.command, params.subargs ?? [])
          if (!gate.ok)
            return {
              exitCode: 126,
              signal: null,
              stdout: '',
              stderr: `denied: ${gate.reason}\n`,
              truncated: false,
              durationMs: 0,
              timedOut: false,
            }
          return execute(deps, context, gate.argv, { env: cliEnvironment(spec) })
        },
      )
      staged.commit()
      catalog.setCoreHooks(`cli.${spec.name}`, {
        needsConversation: true,
        confirmWhen: () => deps.exec.backendName === 'direct',
        modelText: execModelText,
        availableWhen: () => deps.exec.executionAvailable,
        precheck: () => unavailableExecution(deps.exec),
        approversWhen: () => directApprovers(deps.exec),
        riskRangeWhen: () =>
          deps.exec.backendName === 'direct' ? ['high', 'high'] : [spec.risk ?? 'low', spec.risk ?? 'low'],
      })
    } catch (error) {
      deps.log.warn(`CLI tool ${spec.name} is not offered: ${(error as Error).message}`, { plugin, err: error })
    }
  }
}

function describeCommands(spec: CliToolSpec): string {
  return Object.entries(spec.commands)
    .map(([command, entry]) =>
      entry.subcommands ? `${command} (${Object.keys(entry.subcommands).join('|')})` : command,
    )
    .join(', ')
}
