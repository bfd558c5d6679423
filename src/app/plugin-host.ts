import type { Logger } from 'pino'
import { createPluginKv, createPluginLogger, knowledgeHitJson, type ProjectAccess } from '../cmdbus/index.js'
import type { Host, KnowledgeHit, Options } from '../extension/index.js'
import { RetrievalScopeError, type Ingestor, type Retriever } from '../rag/index.js'
import {
  announceAccessChange,
  appendAuditEntry,
  appendEvents,
  getConversation,
  getProject,
  type Store,
} from '../store/index.js'

/** Builds the capabilities a plugin receives at setup. */
export function createPluginHost(
  plugin: string,
  deps: {
    store: Store
    logger: Logger
    options: Options
    access: ProjectAccess
    retriever: Retriever
    ingestor: Ingestor
  },
): Host {
  const { store } = deps
  return {
    kv: createPluginKv(store, plugin),
    log: createPluginLogger(deps.logger, plugin),
    options: { ...deps.options },
    audit: async (action, data) => {
      await store.transaction((tx) =>
        appendAuditEntry(tx, {
          dispatchId: null,
          step: `plugin:${action}`,
          ownerId: null,
          projectId: null,
          conversationId: null,
          commandId: null,
          entrance: null,
          envelope: { plugin, action, data },
        }),
      )
    },
    emit: async (event) => {
      const project = await getProject(store, event.projectId)
      if (!project) throw new Error(`emit: no project ${event.projectId}`)
      // An event about a conversation is its owner's (the project stream shows it to them alone).
      const conversation = event.conversationId ? await getConversation(store, event.conversationId) : undefined
      if (event.conversationId && conversation?.projectId !== project.id)
        throw new Error(`emit: no conversation ${event.conversationId} in project ${project.id}`)
      const type = `plugin.${plugin}.${event.type}`
      await store.transaction((tx) =>
        appendEvents(tx, [
          {
            type,
            projectId: project.id,
            conversationId: event.conversationId ?? null,
            userId: conversation?.ownerId ?? project.ownerId,
            data: event.data,
          },
        ]),
      )
    },
    accessChanged: async (projectId) => {
      const subject = projectId ? (`project:${projectId}` as const) : 'all'
      await announceAccessChange(store, [subject])
      // Here at once too (the notification comes back a moment later).
      store.access.deliver(subject)
    },
    knowledgeSearch: async (actor, query, options = {}) => {
      try {
        const hits = await deps.retriever.retrieveShared(actor.onBehalfOf, query, {
          ...(options.projectId && { projectId: options.projectId }),
          k: options.k ?? 4,
        })
        return hits.map((hit) => knowledgeHitJson(hit) as unknown as KnowledgeHit)
      } catch (error) {
        if (error instanceof RetrievalScopeError) return []
        throw error
      }
    },
    addKnowledge: async (actor, item) => {
      const ownerId = actor.onBehalfOf
      if (!(await deps.access.project(ownerId, item.projectId, 'write')))
        throw new Error(`addKnowledge: ${ownerId} may not write to project ${item.projectId}`)
      const created = await deps.ingestor.addText({
        projectId: item.projectId,
        ownerId,
        title: item.title,
        text: item.text,
        source: 'command',
      })
      return { itemId: created.id }
    },
  }
}
