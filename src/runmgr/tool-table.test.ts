import { describe, expect, it } from 'vitest'
import type { CommandBus, RegisteredCommand } from '../cmdbus/index.js'
import type { Run } from '../store/index.js'
import { toolTable } from './tool-table.js'

// toolTable reads only the bus's catalog and the run's tool settings.
const busOf = (commands: RegisteredCommand[]) => ({ catalog: { list: () => commands } }) as unknown as CommandBus
const run = { profile: { tools: null }, clientTools: [] } as unknown as Run

function command(schema: object, description = 'Looks up the weather'): RegisteredCommand {
  return {
    toolName: 'rdm__weather',
    spec: { id: 'rdm.weather', description, paramsSchema: schema, idempotent: true },
  } as unknown as RegisteredCommand
}

describe('toolTable', () => {
  const schema = {
    type: 'object',
    properties: { city: { type: 'string', pattern: '^[A-Z]' } },
    required: ['city'],
  }

  it('projects a command once: later rounds get the same tool object', () => {
    const weather = command(schema)
    const first = toolTable(busOf([weather]), run).get('rdm__weather')
    const second = toolTable(busOf([weather]), run).get('rdm__weather')
    expect(first?.kind).toBe('command')
    expect(second?.tool).toBe(first?.tool)
    expect(first?.tool.parameters).toMatchObject({ type: 'object', required: ['city'] })
  })

  it('projects again when the command’s schema or description changes', () => {
    const weather = command(schema)
    const before = toolTable(busOf([weather]), run).get('rdm__weather')!.tool
    ;(weather.spec as { description: string }).description = 'Tells the weather'
    const described = toolTable(busOf([weather]), run).get('rdm__weather')!.tool
    expect(described).not.toBe(before)
    expect(described.description).toContain('Tells the weather')
    ;(weather.spec as { paramsSchema: object }).paramsSchema = {
      type: 'object',
      properties: { day: { type: 'string' } },
    }
    const reshaped = toolTable(busOf([weather]), run).get('rdm__weather')!.tool
    expect(reshaped.parameters).toMatchObject({ properties: { day: { type: 'string' } } })
  })
})
