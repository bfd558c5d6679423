import { CommandError, type JsonValue } from '../extension/index.js'
import { RetrievalScopeError, type RetrievalHit, type Retriever } from '../rag/index.js'
import { getConversation, listProjects, updateConversation, type Store } from '../store/index.js'
import type { CommandCatalog } from './command-catalog.js'
import type { ProjectAccess } from './project-access.js'

/** Built-in commands: the `core.` namespace, registered through the same catalog as any plugin. */
export function registerCoreCommands(
  catalog: CommandCatalog,
  deps: { store: Store; access: ProjectAccess; version: string; retriever: Retriever; fullModeTtlMs?: number },
): void {
  const staged = catalog.stage('core', deps.version)
  staged.registry.addCommand(
    {
      id: 'core.list_projects',
      title: 'List projects',
      description: 'Lists the projects the user owns or that are shared with them (at most 50, newest first).',
      paramsSchema: { type: 'object', properties: {}, additionalProperties: false },
      risk: 'low',
      idempotent: true,
      exposeAsTool: { name: 'list_projects' },
    },
    async (_params, context) => {
      const userId = context.actor.onBehalfOf
      const shared = await deps.access.sharedProjectIds(userId)
      const page = await listProjects(deps.store, userId, { limit: 50 }, shared)
      const projects: JsonValue[] = page.items.map((project) => ({
        id: project.id,
        name: project.name,
        description: project.description,
        shared: project.ownerId !== userId,
      }))
      return { projects }
    },
  )
  staged.registry.addCommand<{ query: string; k?: number; scope?: 'project' | 'all' }>(
    {
      id: 'core.knowledge_search',
      title: 'Search project knowledge',
      description:
        'Searches the knowledge of the current project — your own items and what colleagues published there — by words and by meaning. ' +
        'Returns the best passages with the title and id of the item each comes from: cite them. scope "all" searches every project you can see.',
      paramsSchema: {
        type: 'object',
        properties: {
          query: {
            type: 'string',
            minLength: 1,
            maxLength: 2000,
            pattern: '\\S',
            description: 'What to look for, in any language',
          },
          k: { type: 'integer', minimum: 1, maximum: 20, description: 'How many passages (default 4)' },
          scope: { enum: ['project', 'all'], description: 'The current project (default) or everything you can see' },
        },
        required: ['query'],
        additionalProperties: false,
      },
      risk: 'low',
      idempotent: true,
      exposeAsTool: { name: 'knowledge_search' },
    },
    async (params, context) => {
      const projectId = params.scope === 'all' ? undefined : context.project?.id
      try {
        const hits = await deps.retriever.retrieveShared(context.actor.onBehalfOf, params.query, {
          ...(projectId && { projectId }),
          k: params.k ?? 4,
          signal: context.signal,
        })
        return { hits: hits.map(knowledgeHitJson) }
      } catch (error) {
        if (error instanceof RetrievalScopeError) throw new CommandError('not_found', 'project not found')
        throw error
      }
    },
  )
  // Switching the mode goes through the bus like any effect, so it has its audit envelope: who turned
  // confirmations off (full), when, and from which entrance. Never a model tool.
  staged.registry.addCommand<{ mode: 'manual' | 'risky' | 'full' }>(
    {
      id: 'core.set_permission_mode',
      title: 'Set the permission mode',
      description:
        "Sets the conversation's permission mode: manual (medium and high risk ask), risky (only high asks) or full (nothing asks, until PLINTH_FULL_MODE_TTL passes).",
      paramsSchema: {
        type: 'object',
        properties: { mode: { enum: ['manual', 'risky', 'full'] } },
        required: ['mode'],
        additionalProperties: false,
      },
      risk: 'low',
      entrances: ['button', 'card', 'slash', 'chat'],
    },
    async (params, context) => {
      const conversation = context.conversationId
        ? await getConversation(deps.store, context.conversationId)
        : undefined
      if (!conversation)
        throw new CommandError('validation_failed', 'name the conversation (conversationId) whose mode to set')
      const updated = await deps.store.transaction((tx) =>
        updateConversation(
          tx,
          conversation,
          { permissionMode: params.mode },
          { fullModeTtlMs: deps.fullModeTtlMs ?? 3_600_000 },
        ),
      )
      return {
        conversationId: updated.id,
        permissionMode: updated.permissionMode,
        modeExpiresAt: updated.modeExpiresAt,
      }
    },
  )
  staged.commit()
}

/** A hit as tools and plugins see it (the same shape for `knowledge_search` and `host.knowledgeSearch`). */
export function knowledgeHitJson(hit: RetrievalHit): { [key: string]: JsonValue } {
  return {
    itemId: hit.itemId,
    chunkId: hit.chunkId,
    projectId: hit.projectId,
    title: hit.title,
    heading: hit.heading,
    text: hit.text,
    score: hit.score,
    shared: hit.shared,
  }
}
