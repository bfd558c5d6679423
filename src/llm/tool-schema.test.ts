import { describe, expect, it } from 'vitest'
import { projectToolSchema } from './tool-schema.js'

describe('projectToolSchema: what stays', () => {
  it('keeps a plain object schema as it is (a copy), with an empty suffix', () => {
    const schema = {
      type: 'object',
      description: 'Draft a message',
      properties: {
        title: { type: 'string', minLength: 1, maxLength: 80, description: 'Short title' },
        count: { type: 'integer', minimum: 1, maximum: 10, default: 3 },
        tags: { type: 'array', items: { type: 'string', enum: ['a', 'b'] }, uniqueItems: true, maxItems: 5 },
        when: { type: ['string', 'null'], format: 'date-time' },
        mode: { const: 'fast' },
        options: { type: 'object', properties: { dryRun: { type: 'boolean' } }, additionalProperties: false },
        either: { anyOf: [{ type: 'string' }, { type: 'number' }] },
      },
      required: ['title'],
      additionalProperties: false,
    }
    const { parameters, descriptionSuffix } = projectToolSchema(schema)
    expect(parameters).toEqual(schema)
    expect(parameters).not.toBe(schema)
    expect(descriptionSuffix).toBe('')
  })

  it('adds type object and properties to a root that lacks them', () => {
    expect(projectToolSchema({}).parameters).toEqual({ type: 'object', properties: {} })
    expect(projectToolSchema({ type: ['object', 'null'], properties: { a: { type: 'string' } } }).parameters).toEqual({
      type: 'object',
      properties: { a: { type: 'string' } },
    })
  })
})

describe('projectToolSchema: what is dropped', () => {
  it('drops tooling keywords silently at every depth ($schema, $id, $comment, x-* such as x-sensitive)', () => {
    const { parameters, descriptionSuffix } = projectToolSchema({
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      $id: 'urn:plinth:rdm.draft.compose',
      $comment: 'internal',
      'x-plinth-risk': 'low',
      type: 'object',
      properties: { pin: { type: 'string', 'x-sensitive': true, readOnly: true } },
    })
    expect(parameters).toEqual({ type: 'object', properties: { pin: { type: 'string' } } })
    expect(descriptionSuffix).toBe('')
  })

  it('drops constraints providers reject and restates them, with where they applied', () => {
    const { parameters, descriptionSuffix } = projectToolSchema({
      type: 'object',
      properties: {
        kind: { type: 'string', enum: ['person', 'company'] },
        labels: { type: 'object', patternProperties: { '^x-': { type: 'string' } } },
        items: {
          type: 'array',
          items: {
            type: 'object',
            properties: { sku: { type: 'string', not: { const: '' } } },
            unevaluatedProperties: false,
          },
        },
      },
      if: { properties: { kind: { const: 'company' } } },
      then: { required: ['vat'] },
      dependentSchemas: { a: { required: ['b'] } },
    })
    expect(parameters).toEqual({
      type: 'object',
      properties: {
        kind: { type: 'string', enum: ['person', 'company'] },
        labels: { type: 'object' },
        items: { type: 'array', items: { type: 'object', properties: { sku: { type: 'string' } } } },
      },
    })
    expect(descriptionSuffix.split('\n')).toEqual([
      'Argument constraints not expressed in the parameter schema (JSON Schema):',
      '- `labels`: patternProperties {"^x-":{"type":"string"}}',
      '- `items[].sku`: not {"const":""}',
      '- `items[]`: unevaluatedProperties false',
      '- arguments: if {"properties":{"kind":{"const":"company"}}} then {"required":["vat"]}',
      '- arguments: dependentSchemas {"a":{"required":["b"]}}',
    ])
  })

  it('restates tuple items, examples and properties that must not be given', () => {
    const { parameters, descriptionSuffix } = projectToolSchema({
      type: 'object',
      properties: {
        point: { type: 'array', items: [{ type: 'number' }, { type: 'number' }], examples: [[1, 2]] },
        legacy: false,
      },
    })
    expect(parameters).toEqual({ type: 'object', properties: { point: { type: 'array' } } })
    expect(descriptionSuffix).toContain('- `point`: items [{"type":"number"},{"type":"number"}]')
    expect(descriptionSuffix).toContain('- `point`: examples [[1,2]]')
    expect(descriptionSuffix).toContain('- `legacy`: must not be given')
  })

  it('bounds a long restatement', () => {
    const { descriptionSuffix } = projectToolSchema({
      type: 'object',
      patternProperties: { '^a': { enum: Array.from({ length: 500 }, (_, index) => `value-${index}`) } },
    })
    expect(descriptionSuffix.length).toBeLessThan(600)
    expect(descriptionSuffix.endsWith('…')).toBe(true)
  })
})

describe('projectToolSchema: references', () => {
  it('inlines local $refs ($defs, definitions, JSON pointers) and drops the definitions', () => {
    const { parameters, descriptionSuffix } = projectToolSchema({
      type: 'object',
      $defs: {
        address: {
          type: 'object',
          properties: { city: { type: 'string' }, zip: { $ref: '#/definitions/zip' } },
          required: ['city'],
        },
      },
      definitions: { zip: { type: 'string', pattern: '^[0-9]{5}$' } },
      properties: {
        home: { $ref: '#/$defs/address', description: 'Where you live' },
        work: { $ref: '#/$defs/address' },
        copy: { $ref: '#/properties/home/description' },
      },
    })
    const address = {
      type: 'object',
      properties: { city: { type: 'string' }, zip: { type: 'string', pattern: '^[0-9]{5}$' } },
      required: ['city'],
    }
    expect(parameters).toEqual({
      type: 'object',
      properties: { home: { ...address, description: 'Where you live' }, work: address, copy: {} },
    })
    expect(descriptionSuffix).toBe('')
  })

  it('stops at recursive references and unresolvable ones, restating both', () => {
    const { parameters, descriptionSuffix } = projectToolSchema({
      type: 'object',
      $defs: {
        node: {
          type: 'object',
          properties: { name: { type: 'string' }, children: { type: 'array', items: { $ref: '#/$defs/node' } } },
        },
      },
      properties: {
        tree: { $ref: '#/$defs/node' },
        self: { $ref: '#' },
        remote: { $ref: 'https://example.invalid/schema.json', description: 'Remote' },
      },
    })
    expect(parameters).toEqual({
      type: 'object',
      properties: {
        tree: { type: 'object', properties: { name: { type: 'string' }, children: { type: 'array', items: {} } } },
        self: {},
        remote: { description: 'Remote' },
      },
    })
    expect(descriptionSuffix).toContain('- `tree.children[]`: has the same (recursive) schema as #/$defs/node')
    expect(descriptionSuffix).toContain('- `self`: has the same (recursive) schema as the arguments')
    expect(descriptionSuffix).toContain('- `remote`: must match the schema at https://example.invalid/schema.json')
  })

  it('inlines a $ref at the root', () => {
    const { parameters } = projectToolSchema({
      $ref: '#/$defs/params',
      $defs: { params: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } },
    })
    expect(parameters).toEqual({ type: 'object', properties: { q: { type: 'string' } }, required: ['q'] })
  })
})

describe('projectToolSchema: the root must be a plain object', () => {
  it('merges root allOf members into the root', () => {
    const { parameters, descriptionSuffix } = projectToolSchema({
      type: 'object',
      properties: { id: { type: 'string' } },
      required: ['id'],
      allOf: [{ properties: { page: { type: 'integer' } }, required: ['page'] }, { $ref: '#/$defs/paging' }],
      $defs: { paging: { type: 'object', properties: { size: { type: 'integer', maximum: 100 } } } },
    })
    expect(parameters).toEqual({
      type: 'object',
      properties: { id: { type: 'string' }, page: { type: 'integer' }, size: { type: 'integer', maximum: 100 } },
      required: ['id', 'page'],
    })
    expect(descriptionSuffix).toBe('')
  })

  it('turns a root oneOf into the union of its properties (required only where every branch requires) and restates it', () => {
    const branches = [
      {
        type: 'object',
        properties: { kind: { const: 'email' }, address: { type: 'string' } },
        required: ['kind', 'address'],
      },
      {
        type: 'object',
        properties: { kind: { const: 'sms' }, phone: { type: 'string' } },
        required: ['kind', 'phone'],
      },
    ]
    const { parameters, descriptionSuffix } = projectToolSchema({ oneOf: branches })
    expect(parameters).toEqual({
      type: 'object',
      properties: { kind: { const: 'email' }, address: { type: 'string' }, phone: { type: 'string' } },
      required: ['kind'],
    })
    expect(descriptionSuffix).toContain(`- arguments: must match exactly one of ${JSON.stringify(branches)}`)
    expect(parameters).not.toHaveProperty('oneOf')
  })

  it('replaces a root that cannot be an object by an empty object and restates the schema', () => {
    const { parameters, descriptionSuffix } = projectToolSchema({ type: 'string', minLength: 1 })
    expect(parameters).toEqual({ type: 'object', properties: {} })
    expect(descriptionSuffix).toContain('- arguments: the arguments must match {"type":"string","minLength":1}')
  })

  it('keeps nested combinators, projecting each branch', () => {
    const { parameters, descriptionSuffix } = projectToolSchema({
      type: 'object',
      properties: {
        target: {
          oneOf: [
            { type: 'string', $comment: 'id' },
            { type: 'object', properties: { url: { type: 'string' } }, propertyNames: { maxLength: 3 } },
          ],
        },
      },
    })
    expect(parameters).toEqual({
      type: 'object',
      properties: {
        target: { oneOf: [{ type: 'string' }, { type: 'object', properties: { url: { type: 'string' } } }] },
      },
    })
    expect(descriptionSuffix).toContain('- `target.oneOf[1]`: propertyNames {"maxLength":3}')
  })

  it('never mutates its input', () => {
    const schema = {
      type: 'object',
      properties: { a: { $ref: '#/$defs/a' } },
      $defs: { a: { type: 'string', enum: ['x'] } },
      if: {},
      then: {},
    }
    const before = structuredClone(schema)
    const { parameters } = projectToolSchema(schema)
    ;(parameters.properties as { a: { enum: string[] } }).a.enum.push('y')
    expect(schema).toEqual(before)
  })
})
