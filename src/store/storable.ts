/**
 * Values as Postgres can store them (docs/security.md, "outputs with NUL"). `text` cannot hold U+0000
 * and `jsonb` refuses the escape `\u0000` and a lone surrogate's escape, so a program's output, a
 * model's text or a tool's arguments holding one used to fail the statement that stored them — a 500,
 * or a run ended `internal` with its dispatch left `running`. Such characters are stored as U+FFFD (�).
 */

const replacement = '\uFFFD'

/** Text without NUL (lone surrogates need nothing: the UTF-8 encoders on the way replace them). */
export function storableText(text: string): string {
  return text.includes('\0') ? text.replaceAll('\0', replacement) : text
}

function hexAt(json: string, index: number): number {
  const digits = json.slice(index, index + 4)
  return /^[0-9a-fA-F]{4}$/.test(digits) ? Number.parseInt(digits, 16) : -1
}

/**
 * JSON text that jsonb accepts: `\u0000` and the escape of a lone surrogate become `\ufffd`; an escaped
 * surrogate pair is kept. Escapes are found by scanning, so an escaped backslash before `u0000` (the
 * six characters `\u0000` inside a string) is left alone.
 */
export function storableJsonText(json: string): string {
  if (!json.includes('\\u')) return json
  let out = ''
  let last = 0
  for (let index = 0; index < json.length; index++) {
    if (json.charCodeAt(index) !== 92) continue // backslash
    const next = json[index + 1]
    if (next !== 'u') {
      index++ // an escaped character (\\, \", \n, …): skip it whole
      continue
    }
    const code = hexAt(json, index + 2)
    let bad = code === 0
    if (code >= 0xd800 && code <= 0xdbff) {
      // A high surrogate is fine only when an escaped low one follows.
      const low = json[index + 6] === '\\' && json[index + 7] === 'u' ? hexAt(json, index + 8) : -1
      if (low >= 0xdc00 && low <= 0xdfff) {
        index += 11
        continue
      }
      bad = true
    } else if (code >= 0xdc00 && code <= 0xdfff) bad = true
    if (bad) {
      out += `${json.slice(last, index)}\\ufffd`
      last = index + 6
    }
    index += 5
  }
  return last === 0 ? json : out + json.slice(last)
}

/** `JSON.stringify` for a jsonb column. */
export function storableJson(value: unknown): string {
  return storableJsonText(JSON.stringify(value))
}

/**
 * A statement's parameters as they may be stored: strings lose NUL; plain objects (which the drivers
 * would send as JSON) are sent as storable JSON. The same array when nothing needed a change.
 */
export function storableParameters<T>(values: readonly T[]): readonly T[] {
  let changed: unknown[] | null = null
  for (let index = 0; index < values.length; index++) {
    const value = values[index] as unknown
    let safe = value
    if (typeof value === 'string') {
      if (value.includes('\0')) safe = storableText(value)
    } else if (
      value !== null &&
      typeof value === 'object' &&
      !Array.isArray(value) &&
      !(value instanceof Date) &&
      !ArrayBuffer.isView(value)
    ) {
      safe = storableJson(value)
    }
    if (safe !== value) {
      changed ??= [...values]
      changed[index] = safe
    }
  }
  return (changed ?? values) as readonly T[]
}
