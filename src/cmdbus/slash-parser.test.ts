import { describe, expect, it } from 'vitest'
import type { JsonSchema, JsonValue } from '../extension/index.js'
import { parseSlash } from './slash-parser.js'

const pingSchema: JsonSchema = { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'string' } } }

/** rdm.ping-like: `target` is required, so bare words fill it first, then `message`. */
const targetSchema: JsonSchema = {
  type: 'object',
  properties: {
    message: { type: 'string' },
    target: { type: 'string' },
    count: { type: 'integer' },
    loud: { type: 'boolean' },
    ratio: { type: 'number' },
  },
  required: ['target'],
}

const stringSchema: JsonSchema = { type: 'object', properties: { a: { type: 'string' }, b: { type: 'string' } } }

describe('parseSlash: text into a command id and params', () => {
  it.each<[text: string, schema: JsonSchema, commandId: string | null, params: { [key: string]: JsonValue }]>([
    ['/rdm.ping a=1 b="two words"', pingSchema, 'rdm.ping', { a: 1, b: 'two words' }],
    ['/rdm.ping a=-3 b=x', pingSchema, 'rdm.ping', { a: -3, b: 'x' }],
    ['  /rdm.ping   a=2   ', pingSchema, 'rdm.ping', { a: 2 }],
    ['/rdm.ping', pingSchema, 'rdm.ping', {}],
    // strings stay strings when the schema says string
    ['/x.y a=1 b=true', stringSchema, 'x.y', { a: '1', b: 'true' }],
    ['/x.y a=007', stringSchema, 'x.y', { a: '007' }],
    // typed by the schema
    ['/x.y target=t loud=true', targetSchema, 'x.y', { target: 't', loud: true }],
    ['/x.y target=t loud=false', targetSchema, 'x.y', { target: 't', loud: false }],
    ['/x.y target=t ratio=-1.5', targetSchema, 'x.y', { target: 't', ratio: -1.5 }],
    ['/x.y target=t ratio=1e3', targetSchema, 'x.y', { target: 't', ratio: 1000 }],
    // values that do not fit the type are kept as typed, for schema validation to report
    ['/x.y target=t loud=yes', targetSchema, 'x.y', { target: 't', loud: 'yes' }],
    ['/x.y target=t count=many', targetSchema, 'x.y', { target: 't', count: 'many' }],
    ['/x.y target=t count=0x10', targetSchema, 'x.y', { target: 't', count: '0x10' }],
    ['/x.y target=t count=Infinity', targetSchema, 'x.y', { target: 't', count: 'Infinity' }],
    // properties the schema does not know are passed on as strings
    ['/x.y target=t extra=5', targetSchema, 'x.y', { target: 't', extra: '5' }],
    // positional words fill the properties in order, required first
    ['/rdm.ping target=x "quoted value"', targetSchema, 'rdm.ping', { target: 'x', message: 'quoted value' }],
    ['/rdm.ping here "hello there"', targetSchema, 'rdm.ping', { target: 'here', message: 'hello there' }],
    ['/rdm.ping message=hi there', targetSchema, 'rdm.ping', { message: 'hi', target: 'there' }],
    ['/x.y a b', pingSchema, 'x.y', { a: 'a', b: 'b' }],
    ['/x.y 5', pingSchema, 'x.y', { a: 5 }],
    // quoting
    ["/x.y a='single quoted' b=x", stringSchema, 'x.y', { a: 'single quoted', b: 'x' }],
    ['/x.y a="say \\"hi\\"" b=1', stringSchema, 'x.y', { a: 'say "hi"', b: '1' }],
    ['/x.y a="back\\\\slash"', stringSchema, 'x.y', { a: 'back\\slash' }],
    ["/x.y a='no \\escapes'", stringSchema, 'x.y', { a: 'no \\escapes' }],
    ['/x.y a="it\'s" b=\'say "hi"\'', stringSchema, 'x.y', { a: "it's", b: 'say "hi"' }],
    ['/x.y a=pre"fix suffix"', stringSchema, 'x.y', { a: 'prefix suffix' }],
    ['/x.y "a=b"', stringSchema, 'x.y', { a: 'a=b' }],
    ["/x.y 'a=b'", stringSchema, 'x.y', { a: 'a=b' }],
    ['/x.y a="x=y" b=c=d', stringSchema, 'x.y', { a: 'x=y', b: 'c=d' }],
    ['/x.y a="" b=\'\'', stringSchema, 'x.y', { a: '', b: '' }],
    ['/x.y ""', stringSchema, 'x.y', { a: '' }],
    // key= sets an empty value (even for a typed property: validation reports it)
    ['/x.y a= b=2', stringSchema, 'x.y', { a: '', b: '2' }],
    ['/x.y a=', pingSchema, 'x.y', { a: '' }],
    // unicode
    ['/x.y a=héllo b="日本語 ✓ 🎉"', stringSchema, 'x.y', { a: 'héllo', b: '日本語 ✓ 🎉' }],
    ['/x.y 🎉 "ça va"', stringSchema, 'x.y', { a: '🎉', b: 'ça va' }],
    // text without a leading /command
    ['target=x hello', targetSchema, null, { target: 'x', message: 'hello' }],
    ['hello world', stringSchema, null, { a: 'hello', b: 'world' }],
    ['"/not.a.command" x', stringSchema, null, { a: '/not.a.command', b: 'x' }],
    ['', stringSchema, null, {}],
  ])('%j', (text, schema, commandId, params) => {
    expect(parseSlash(text, schema)).toEqual({ ok: true, commandId, params })
  })

  it('keeps a value with a leading slash after the command as a value', () => {
    expect(parseSlash('/fs.list /tmp', { type: 'object', properties: { path: { type: 'string' } } })).toEqual({
      ok: true,
      commandId: 'fs.list',
      params: { path: '/tmp' },
    })
  })
})

describe('parseSlash: errors', () => {
  it.each<[text: string, schema: JsonSchema, message: RegExp]>([
    ['/x.y a="unterminated', stringSchema, /unbalanced/],
    ["/x.y a='unterminated", stringSchema, /unbalanced/],
    ['/x.y "a b', stringSchema, /unbalanced/],
    ['/x.y a="ends with backslash\\"', stringSchema, /unbalanced/],
    ['/x.y one two three', stringSchema, /three/],
    ['/x.y a=1 b=2 extra', stringSchema, /extra/],
    ['/x.y anything', { type: 'object' }, /anything/],
  ])('%j', (text, schema, message) => {
    const result = parseSlash(text, schema)
    expect(result.ok).toBe(false)
    if (!result.ok) expect(result.message).toMatch(message)
  })

  it('says which quote is unbalanced and where', () => {
    expect(parseSlash('/x.y a=ok b="open', stringSchema)).toEqual({
      ok: false,
      message: expect.stringMatching(/unbalanced " quote.*column 13/),
    })
  })
})
