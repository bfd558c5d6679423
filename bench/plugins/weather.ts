/**
 * The agent-round bench's tool: `bench.weather`, offered to the model as `get_weather`, answering a
 * constant at once, so a round measures Plinth (gate, dispatch, audit, ledger) and not the tool.
 * Loaded by absolute path from the bench's config file; imports only the extension surface.
 */
import { definePlugin } from '../../src/extension/index.js'

export default definePlugin({
  name: 'bench',
  version: '1.0.0',
  surface: '^1.0.0',
  setup(registry) {
    registry.addCommand<{ city: string }>(
      {
        id: 'bench.weather',
        title: 'Weather',
        description: 'The current weather in a city.',
        paramsSchema: {
          type: 'object',
          required: ['city'],
          additionalProperties: false,
          properties: { city: { type: 'string', minLength: 1, maxLength: 100 } },
        },
        risk: 'low',
        exposeAsTool: { name: 'get_weather' },
      },
      (params) => ({ city: params.city, tempC: 21, sky: 'clear' }),
    )
  },
})
