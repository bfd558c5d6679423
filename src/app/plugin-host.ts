import type { Logger } from 'pino'
import { createPluginKv, createPluginLogger } from '../cmdbus/index.js'
import type { Host, Options } from '../extension/index.js'
import { announceAccessChange, appendAuditEntry, appendEvents, getProject, type Store } from '../store/index.js'

/** Builds the capabilities a plugin receives at setup. */
export function createPluginHost(plugin: string, deps: { store: Store; logger: Logger; options: Options }): Host {
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
      const project = await getProject(store.db, event.projectId)
      if (!project) throw new Error(`emit: no project ${event.projectId}`)
      const type = `plugin.${plugin}.${event.type}`
      await store.transaction((tx) =>
        appendEvents(tx, [{ type, projectId: project.id, conversationId: event.conversationId ?? null, userId: project.ownerId, data: event.data }]),
      )
    },
    accessChanged: async (projectId) => {
      await announceAccessChange(store.db, [projectId ? `project:${projectId}` : 'all'])
    },
    // Retrieval arrives with the rag module; until then there is no knowledge to search.
    knowledgeSearch: async () => [],
  }
}
