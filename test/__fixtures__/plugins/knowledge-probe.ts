import { definePlugin } from '../../../src/extension/index.js'

/** Exposes host.knowledgeSearch as a command, so a test can compare it with the knowledge_search tool. */
export default definePlugin({
  name: 'probe',
  version: '1.0.0',
  surface: '^1.1.0',
  setup(registry, host) {
    registry.addCommand<{ query: string }>(
      {
        id: 'probe.search',
        title: 'Search through the host',
        description: 'host.knowledgeSearch for the caller, in the current project',
        paramsSchema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'], additionalProperties: false },
        risk: 'low',
        idempotent: true,
      },
      async (params, context) => ({ hits: (await host.knowledgeSearch(context.actor, params.query, { ...(context.project && { projectId: context.project.id }) })) as never }),
    )
  },
})
