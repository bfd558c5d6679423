import { definePlugin } from '../../../src/extension/index.js'

// Two declared namespaces; logs in both argument orders.
export default definePlugin({
  name: 'notes-kit',
  version: '1.0.0',
  surface: '^1.4.0',
  namespaces: ['notes', 'todo'],
  setup(registry) {
    registry.addCommand(
      { id: 'notes.add', title: 'Add a note', description: 'd', paramsSchema: { type: 'object', required: ['text'], properties: { text: { type: 'string' } } }, risk: 'low' },
      (params, context) => {
        context.log.info({ noteLength: params.text.length }, 'note added')
        return { saved: params.text }
      },
    )
    registry.addCommand(
      { id: 'todo.add', title: 'Add a to-do', description: 'd', paramsSchema: { type: 'object', required: ['item'], properties: { item: { type: 'string' } } }, risk: 'low' },
      (params, context) => {
        context.log.warn('to-do added', { item: params.item })
        return { added: params.item }
      },
    )
  },
})
