import { definePlugin } from '../../../src/extension/index.js'

/** Emits a plugin event about the conversation a command runs in (host.emit), so a test can see who gets it. */
export default definePlugin({
  name: 'emitter',
  version: '1.0.0',
  surface: '^1.1.0',
  setup(registry, host) {
    registry.addCommand<{ note: string }>(
      {
        id: 'emitter.note',
        title: 'Note something on the conversation stream',
        description: 'host.emit of a plugin event on the current conversation',
        paramsSchema: { type: 'object', properties: { note: { type: 'string' } }, required: ['note'], additionalProperties: false },
        risk: 'low',
      },
      async (params, context) => {
        await host.emit({
          type: 'noted',
          projectId: context.project!.id,
          ...(context.conversationId && { conversationId: context.conversationId }),
          data: { note: params.note },
        })
        return { noted: true }
      },
    )
  },
})
