import type { JsonSchema, JsonValue } from '../extension/index.js'

export type SlashParse =
  { ok: true; commandId: string | null; params: { [key: string]: JsonValue } } | { ok: false; message: string }

/**
 * Parses slash text (`/rdm.ping target=x "quoted value" count=2`) into params, the one parser for
 * every entrance. `key=value` sets a param; bare words fill the schema's properties in declared
 * order (required ones first) that are not yet set. Values are typed by the schema: integers,
 * numbers and booleans are converted, everything else stays a string. Quotes (single or double)
 * group words; a backslash escapes the next character inside double quotes.
 */
export function parseSlash(text: string, schema: JsonSchema): SlashParse {
  const tokens = tokenize(text.trim())
  if (!tokens.ok) return tokens
  const words = tokens.words
  let commandId: string | null = null
  if (words[0]?.raw.startsWith('/') && !words[0].quoted) {
    commandId = words[0].raw.slice(1)
    words.shift()
  }
  const properties = (schema.properties ?? {}) as Record<string, JsonSchema>
  const required = Array.isArray(schema.required) ? (schema.required as string[]) : []
  const order = [...required, ...Object.keys(properties).filter((name) => !required.includes(name))]
  const params: { [key: string]: JsonValue } = {}
  const positional: string[] = []
  for (const word of words) {
    const equals = word.equals
    if (equals > 0) {
      const key = word.value.slice(0, equals)
      params[key] = convert(word.value.slice(equals + 1), properties[key])
    } else {
      positional.push(word.value)
    }
  }
  for (const value of positional) {
    const slot = order.find((name) => !(name in params))
    if (!slot)
      return { ok: false, message: `unexpected argument ${JSON.stringify(value)}: every parameter is already set` }
    params[slot] = convert(value, properties[slot])
  }
  return { ok: true, commandId, params }
}

interface Word {
  /** As typed (for detecting `/command` and `key=`). */
  raw: string
  /** With quotes removed. */
  value: string
  quoted: boolean
  /** Index in `value` of the first `=` outside quotes (-1 if none): `"a=b"` is a bare word, not a key. */
  equals: number
}

function tokenize(text: string): { ok: true; words: Word[] } | { ok: false; message: string } {
  const words: Word[] = []
  let index = 0
  while (index < text.length) {
    while (index < text.length && /\s/.test(text[index] as string)) index++
    if (index >= text.length) break
    let raw = ''
    let value = ''
    let quoted = false
    let equals = -1
    while (index < text.length && !/\s/.test(text[index] as string)) {
      const char = text[index] as string
      if (char === '"' || char === "'") {
        const start = index
        quoted = quoted || raw === ''
        index++
        let closed = false
        while (index < text.length) {
          const inner = text[index] as string
          if (inner === char) {
            closed = true
            index++
            break
          }
          if (inner === '\\' && char === '"' && index + 1 < text.length) {
            value += text[index + 1]
            index += 2
            continue
          }
          value += inner
          index++
        }
        if (!closed) return { ok: false, message: `unbalanced ${char} quote starting at column ${start + 1}` }
        raw += text.slice(start, index)
        continue
      }
      if (char === '=' && equals === -1) equals = value.length
      raw += char
      value += char
      index++
    }
    words.push({ raw, value, quoted, equals })
  }
  return { ok: true, words }
}

function convert(value: string, schema: JsonSchema | undefined): JsonValue {
  const type = schema?.type
  // Decimal notation only: `Number()` would also take `0x10`, `Infinity` and padded text.
  if ((type === 'integer' || type === 'number') && /^-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(value))
    return Number(value)
  if (type === 'boolean' && (value === 'true' || value === 'false')) return value === 'true'
  return value
}
