import { describe, expect, it } from 'vitest'
import { toolSchemaProblem } from '../src/runmgr/index.js'

// A client tool's `parameters` (native clientTools, AG-UI tools): valid JSON Schema throughout.
describe('client tool schemas', () => {
  it('takes object schemas as clients emit them: zod’s 2020-12 $schema, formats, extension keywords', () => {
    const zod = {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      properties: { a: { type: 'string', format: 'email' }, b: { type: 'array', prefixItems: [{ type: 'string' }] } },
      required: ['a'],
      additionalProperties: false,
      'x-ui': { widget: 'text' },
    }
    expect(toolSchemaProblem(zod)).toBeUndefined()
    expect(toolSchemaProblem({ type: 'object' })).toBeUndefined()
    // Draft-04 / OpenAPI 3.0 boolean bounds, an empty enum, a nullable union: what clients send.
    const older = {
      type: 'object',
      properties: {
        n: { type: 'number', minimum: 0, exclusiveMinimum: true },
        e: { type: 'string', enum: [] },
        u: { type: ['string', 'null'] },
      },
    }
    expect(toolSchemaProblem(older)).toBeUndefined()
  })

  it('refuses what is not an object schema, or not JSON Schema anywhere inside, saying where', () => {
    expect(toolSchemaProblem({ type: 'string' })).toBe('must be a JSON Schema with type "object"')
    expect(toolSchemaProblem([])).toBe('must be a JSON Schema object')
    expect(toolSchemaProblem({ type: 'object', properties: { a: { type: 'nonsense' } } })).toMatch(
      /^is not valid JSON Schema: \/properties\/a\/type /,
    )
    expect(toolSchemaProblem({ type: 'object', required: 'a' })).toMatch(/^is not valid JSON Schema: \/required /)
  })
})
