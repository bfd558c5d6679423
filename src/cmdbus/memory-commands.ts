import { CommandError, type CommandContext, type JsonValue } from '../extension/index.js'
import { memoryLimits, type Memories, type MemoryHit } from '../rag/index.js'
import { RequestError, type Memory } from '../store/index.js'
import type { CommandCatalog } from './command-catalog.js'

const scopeSchema = {
  enum: ['user', 'project'],
  description: 'user (default): only you, in every project; project: everyone who works in the current project',
}
// The length is the service's check (413 memory_too_large), as for the text.
const name = (description: string) => ({
  type: 'string',
  minLength: 1,
  description: `${description} (at most ${memoryLimits.nameChars} characters)`,
})

/**
 * Long-term memory as commands (docs/guides/memory.md): the model's tools, and the same effects from
 * HTTP (`/api/memories`) — through the bus, so every write has its audit envelope and an operator's risk
 * rule can make it ask first.
 */
export function registerMemoryCommands(catalog: CommandCatalog, deps: { memories: Memories; version: string }): void {
  const staged = catalog.stage('memory', deps.version)
  staged.registry.addCommand<{
    text: string
    key?: string
    namespace?: string
    value?: JsonValue
    scope?: 'user' | 'project'
  }>(
    {
      id: 'memory.remember',
      title: 'Remember a fact',
      description:
        'Keeps a fact for later conversations: about the user (scope user, the default) or about the current project (scope project). ' +
        'Give a key to name it: remembering the same key again replaces the fact. Write the text so it reads well on its own.',
      paramsSchema: {
        type: 'object',
        properties: {
          text: {
            type: 'string',
            minLength: 1,
            pattern: '\\S',
            // The length is the service's check: over it is memory_too_large (413), not a schema error.
            description: `The fact, as a sentence (at most ${memoryLimits.textChars} characters)`,
          },
          key: name('A short name for the fact (e.g. "preferred-language"); the same key replaces it'),
          namespace: name('Groups facts (default "default")'),
          value: { description: 'Structured data for the fact, if any (at most 16 KiB as JSON)' },
          scope: scopeSchema,
        },
        required: ['text'],
        additionalProperties: false,
      },
      risk: 'low',
      exposeAsTool: { name: 'memory_remember' },
    },
    async (params, context) =>
      refusals(async () => {
        const { memory, created } = await deps.memories.remember(context.actor.onBehalfOf, {
          text: params.text,
          ...(params.key !== undefined && { key: params.key }),
          ...(params.namespace !== undefined && { namespace: params.namespace }),
          ...(params.value !== undefined && { value: params.value }),
          scope: params.scope ?? 'user',
          projectId: projectOf(context),
        })
        return { memory: memoryJson(memory), created }
      }),
  )
  staged.registry.addCommand<{ query: string; k?: number; scope?: 'user' | 'project'; namespace?: string }>(
    {
      id: 'memory.recall',
      title: 'Recall facts',
      description:
        'Searches what was remembered — your facts about the user and the current project’s — by words and by meaning. Returns the best matches.',
      paramsSchema: {
        type: 'object',
        properties: {
          query: { type: 'string', minLength: 1, maxLength: 2000, pattern: '\\S', description: 'What to look for' },
          k: { type: 'integer', minimum: 1, maximum: 20, description: 'How many facts (default 5)' },
          scope: { ...scopeSchema, description: 'Only the user’s facts, or only the project’s (default both)' },
          namespace: name('Only this namespace'),
        },
        required: ['query'],
        additionalProperties: false,
      },
      risk: 'low',
      idempotent: true,
      exposeAsTool: { name: 'memory_recall' },
    },
    async (params, context) =>
      refusals(async () => {
        const projectId = projectOf(context)
        // As for a write: the project's facts need a project to be the project's.
        if (params.scope === 'project' && !projectId)
          throw new CommandError(
            'validation_failed',
            'scope "project" needs a project: call it in a conversation, or with the project',
          )
        const hits = await deps.memories.recall(context.actor.onBehalfOf, params.query, {
          k: params.k ?? 5,
          ...(params.scope && { scope: params.scope }),
          ...(params.namespace !== undefined && { namespace: params.namespace }),
          // Outside a project only the user's own facts.
          ...(projectId ? { projectId } : { scope: 'user' as const }),
          signal: context.signal,
        })
        return { memories: hits.map(hitJson) }
      }),
  )
  staged.registry.addCommand<{ id?: string; key?: string; namespace?: string; scope?: 'user' | 'project' }>(
    {
      id: 'memory.forget',
      title: 'Forget a fact',
      description: 'Deletes a remembered fact, named by its id or by its key (and namespace and scope).',
      paramsSchema: {
        type: 'object',
        properties: {
          id: { type: 'string', minLength: 1, maxLength: 100, description: 'The memory’s id' },
          key: name('The fact’s key'),
          namespace: name('Its namespace (default "default")'),
          scope: scopeSchema,
        },
        additionalProperties: false,
      },
      risk: 'low',
      exposeAsTool: { name: 'memory_forget' },
    },
    async (params, context) =>
      refusals(async () => {
        if (params.id === undefined && params.key === undefined)
          throw new CommandError('validation_failed', 'name the memory: id, or key')
        const forgotten = await deps.memories.forget(
          context.actor.onBehalfOf,
          params.id !== undefined
            ? { id: params.id }
            : {
                key: params.key!,
                ...(params.namespace !== undefined && { namespace: params.namespace }),
                scope: params.scope ?? 'user',
                projectId: projectOf(context),
              },
        )
        return { forgotten: memoryJson(forgotten) }
      }),
  )
  staged.commit()
}

function projectOf(context: CommandContext): string | null {
  return context.project?.id ?? null
}

/** A service's refusal becomes the command's error with the same stable code. */
async function refusals<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work()
  } catch (error) {
    if (error instanceof RequestError) throw new CommandError(error.code, error.message)
    throw error
  }
}

/** A memory as tools and the HTTP API show it. */
export function memoryJson(memory: Memory): { [key: string]: JsonValue } {
  return {
    id: memory.id,
    scope: memory.scope,
    projectId: memory.projectId,
    namespace: memory.namespace,
    key: memory.key,
    value: memory.value,
    text: memory.text,
    ownerId: memory.ownerId,
    createdAt: memory.createdAt,
    updatedAt: memory.updatedAt,
  }
}

function hitJson(hit: MemoryHit): { [key: string]: JsonValue } {
  return { ...memoryJson(hit), score: hit.score }
}
