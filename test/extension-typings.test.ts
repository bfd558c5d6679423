// Type-level checks of the plugin surface: `npm run typecheck` compiles this file, so a wrong
// inference or an accepted misuse fails the build; vitest runs the plugin too.
import { describe, expect, expectTypeOf, it } from 'vitest'
import { definePlugin, type JsonValue, type LogMethod, type PluginLogger } from '../src/extension/index.js'
import { setupPlugin } from '../src/testing/index.js'

const notes = definePlugin({
  name: 'notes',
  version: '1.0.0',
  surface: '^1.4.0',
  setup(registry) {
    registry.addCommand(
      {
        id: 'notes.add',
        title: 'Add a note',
        description: 'Stores a short note.',
        paramsSchema: {
          type: 'object',
          required: ['text'],
          additionalProperties: false,
          properties: { text: { type: 'string', minLength: 1 }, pinned: { type: 'boolean' } },
        },
        risk: (params) => (params.pinned ? 'medium' : 'low'),
        preview: (params) => {
          expectTypeOf(params).toEqualTypeOf<{ text: string; pinned?: boolean }>()
          return `Add the note "${params.text}"`
        },
      },
      (params, context) => {
        // Inferred from paramsSchema: no generic, no cast.
        expectTypeOf(params).toEqualTypeOf<{ text: string; pinned?: boolean }>()
        expectTypeOf(params.text).toEqualTypeOf<string>()
        // @ts-expect-error -- not in the schema (additionalProperties: false)
        void params.title
        // @ts-expect-error -- text is a string, not a number
        const doubled: number = params.text * 2
        void doubled
        context.log.info({ length: params.text.length }, 'note added')
        context.log.info('note added', { length: params.text.length })
        return { saved: params.text.toUpperCase() }
      },
    )
    // An explicit type still wins over the schema.
    registry.addCommand<{ [key: string]: JsonValue; step: number }>(
      {
        id: 'notes.count',
        title: 'Count',
        description: 'd',
        paramsSchema: { type: 'object', properties: { step: { type: 'integer' } } },
        risk: 'low',
      },
      (params) => {
        expectTypeOf(params.step).toEqualTypeOf<number>()
        return params.step + 1
      },
    )
  },
})

describe('plugin typings', () => {
  it('the logger takes both argument orders, and is typed LogMethod', () => {
    expectTypeOf<PluginLogger['info']>().toEqualTypeOf<LogMethod>()
    expectTypeOf<LogMethod>().toBeCallableWith({ id: 1 }, 'message')
    expectTypeOf<LogMethod>().toBeCallableWith('message', { id: 1 })
  })

  it('a plugin typed from its schema runs as written', async () => {
    const harness = await setupPlugin(notes)
    expect(await harness.dispatch('notes.add', { text: 'launch at dawn' })).toEqual({ saved: 'LAUNCH AT DAWN' })
  })
})
